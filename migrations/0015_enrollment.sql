CREATE TABLE `enrollment_tokens` (
	`id` text PRIMARY KEY NOT NULL,
	`fleet_id` text NOT NULL,
	`name` text,
	`hash` text NOT NULL,
	`roles` text NOT NULL,
	`reboot_group` text NOT NULL,
	`kind` text NOT NULL,
	`hostname_pattern` text,
	`max_uses` integer NOT NULL,
	`uses` integer DEFAULT 0 NOT NULL,
	`expires_at` integer NOT NULL,
	`created_by` text NOT NULL,
	`created_at` integer NOT NULL,
	`revoked_at` integer,
	`last_used_at` integer,
	CONSTRAINT "enrollment_tokens_uses_ck" CHECK("enrollment_tokens"."uses" >= 0 AND "enrollment_tokens"."uses" <= "enrollment_tokens"."max_uses")
);
--> statement-breakpoint
CREATE INDEX `enrollment_tokens_fleet_idx` ON `enrollment_tokens` (`fleet_id`,`id`);--> statement-breakpoint
CREATE TABLE `enrollments` (
	`token_id` text NOT NULL,
	`machine_id` text NOT NULL,
	`server_id` text NOT NULL,
	`hostname` text NOT NULL,
	`created_at` integer NOT NULL,
	PRIMARY KEY(`token_id`, `machine_id`)
);
