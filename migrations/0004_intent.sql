CREATE TABLE `agent_channel_history` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`fleet_id` text NOT NULL,
	`agent` text NOT NULL,
	`image` text NOT NULL,
	`version` text NOT NULL,
	`previous_image` text,
	`previous_version` text,
	`at` integer NOT NULL,
	`actor` text NOT NULL
);
--> statement-breakpoint
CREATE INDEX `agent_channel_history_idx` ON `agent_channel_history` (`fleet_id`,`agent`,`id`);--> statement-breakpoint
CREATE TABLE `agent_channels` (
	`fleet_id` text NOT NULL,
	`agent` text NOT NULL,
	`image` text NOT NULL,
	`version` text NOT NULL,
	`updated_at` integer NOT NULL,
	`updated_by` text NOT NULL,
	PRIMARY KEY(`fleet_id`, `agent`)
);
--> statement-breakpoint
CREATE TABLE `fleet_intent` (
	`fleet_id` text PRIMARY KEY NOT NULL,
	`rev` integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE `fleet_removals` (
	`fleet_id` text PRIMARY KEY NOT NULL,
	`removed_at` integer NOT NULL,
	`attempts` integer DEFAULT 0 NOT NULL
);
--> statement-breakpoint
CREATE TABLE `plan_marks` (
	`server_id` text PRIMARY KEY NOT NULL,
	`fleet_id` text NOT NULL,
	`rev` integer NOT NULL,
	`marked_at` integer NOT NULL,
	`attempts` integer DEFAULT 0 NOT NULL
);
--> statement-breakpoint
CREATE INDEX `plan_marks_marked_at_idx` ON `plan_marks` (`marked_at`);--> statement-breakpoint
CREATE TABLE `role_profiles` (
	`fleet_id` text NOT NULL,
	`role` text NOT NULL,
	`agents` text NOT NULL,
	`updated_at` integer NOT NULL,
	`updated_by` text NOT NULL,
	PRIMARY KEY(`fleet_id`, `role`)
);
--> statement-breakpoint
ALTER TABLE `servers` ADD `stale_at` integer;--> statement-breakpoint
CREATE INDEX `servers_stale_at_idx` ON `servers` (`stale_at`) WHERE "servers"."status" != 'stale';--> statement-breakpoint
-- Servers projected before stale_at existed get their deadline from what the index already holds;
-- their ledgers rewrite it on their next projection.
UPDATE `servers` SET `stale_at` = `last_seen` + 1000 * (SELECT `stale_after_s` FROM `fleets` WHERE `fleets`.`id` = `servers`.`fleet_id`)
WHERE `last_seen` IS NOT NULL AND `state` != 'removed';
