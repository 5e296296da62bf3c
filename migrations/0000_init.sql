CREATE TABLE `agent_instances` (
	`server_id` text NOT NULL,
	`agent` text NOT NULL,
	`fleet_id` text NOT NULL,
	`instance_id` text,
	`desired_image` text,
	`desired_version` text,
	`reported_image` text,
	`reported_version` text,
	`reported_state` text,
	`status` text NOT NULL,
	`updated_at` integer NOT NULL,
	PRIMARY KEY(`server_id`, `agent`)
);
--> statement-breakpoint
CREATE INDEX `agent_instances_agent_idx` ON `agent_instances` (`agent`,`server_id`);--> statement-breakpoint
CREATE INDEX `agent_instances_desired_image_idx` ON `agent_instances` (`desired_image`,`server_id`,`agent`);--> statement-breakpoint
CREATE INDEX `agent_instances_reported_image_idx` ON `agent_instances` (`reported_image`,`server_id`,`agent`);--> statement-breakpoint
CREATE TABLE `audit_log` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`at` integer NOT NULL,
	`actor` text NOT NULL,
	`action` text NOT NULL,
	`target` text NOT NULL,
	`details` text
);
--> statement-breakpoint
CREATE INDEX `audit_log_target_idx` ON `audit_log` (`target`,`id`);--> statement-breakpoint
CREATE TABLE `fleets` (
	`id` text PRIMARY KEY NOT NULL,
	`capabilities` text NOT NULL,
	`stale_after_s` integer NOT NULL,
	`lock_ttl_s` integer NOT NULL,
	`fleetlock_key_hash` text,
	`allow_unknown_ids` integer DEFAULT false NOT NULL,
	`default_group_slots` integer,
	`created_at` integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE `servers` (
	`id` text PRIMARY KEY NOT NULL,
	`fleet_id` text NOT NULL,
	`hostname` text NOT NULL,
	`kind` text NOT NULL,
	`roles` text NOT NULL,
	`reboot_group` text NOT NULL,
	`fleetlock_id` text,
	`state` text NOT NULL,
	`status` text NOT NULL,
	`desired_generation` integer NOT NULL,
	`reported_generation` integer,
	`boot_id` text,
	`last_seen` integer,
	`created_at` integer NOT NULL,
	`updated_at` integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX `servers_fleet_idx` ON `servers` (`fleet_id`,`id`);--> statement-breakpoint
CREATE INDEX `servers_status_idx` ON `servers` (`status`,`id`);--> statement-breakpoint
CREATE INDEX `servers_fleet_status_idx` ON `servers` (`fleet_id`,`status`,`id`);--> statement-breakpoint
CREATE INDEX `servers_fleet_last_seen_idx` ON `servers` (`fleet_id`,`last_seen`);--> statement-breakpoint
CREATE UNIQUE INDEX `servers_fleetlock_id_uq` ON `servers` (`fleet_id`,`fleetlock_id`) WHERE "servers"."fleetlock_id" IS NOT NULL;--> statement-breakpoint
CREATE TABLE `tokens` (
	`id` text PRIMARY KEY NOT NULL,
	`kind` text NOT NULL,
	`scope` text NOT NULL,
	`server_id` text,
	`name` text NOT NULL,
	`hash` text NOT NULL,
	`created_by` text NOT NULL,
	`created_at` integer NOT NULL,
	`revoked_at` integer
);
--> statement-breakpoint
CREATE INDEX `tokens_server_idx` ON `tokens` (`server_id`);