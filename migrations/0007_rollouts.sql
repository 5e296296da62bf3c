CREATE TABLE `rollout_locks` (
	`fleet_id` text NOT NULL,
	`agent` text NOT NULL,
	`rollout_id` text NOT NULL,
	`created_at` integer NOT NULL,
	PRIMARY KEY(`fleet_id`, `agent`)
);
--> statement-breakpoint
CREATE TABLE `rollout_targets` (
	`rollout_id` text NOT NULL,
	`pass` integer NOT NULL,
	`server_id` text NOT NULL,
	`hostname` text NOT NULL,
	`state` text NOT NULL,
	`image` text NOT NULL,
	`from_image` text,
	`generation` integer,
	`started_at` integer,
	`ended_at` integer,
	`reason` text,
	`updated_at` integer NOT NULL,
	PRIMARY KEY(`rollout_id`, `pass`, `server_id`)
);
--> statement-breakpoint
CREATE INDEX `rollout_targets_state_idx` ON `rollout_targets` (`rollout_id`,`state`,`server_id`);--> statement-breakpoint
CREATE INDEX `rollout_targets_server_idx` ON `rollout_targets` (`server_id`,`rollout_id`);--> statement-breakpoint
CREATE TABLE `rollouts` (
	`id` text PRIMARY KEY NOT NULL,
	`fleet_id` text NOT NULL,
	`agent` text NOT NULL,
	`image` text NOT NULL,
	`version` text NOT NULL,
	`state` text NOT NULL,
	`pass` integer NOT NULL,
	`counts` text NOT NULL,
	`reason` text,
	`created_by` text NOT NULL,
	`created_at` integer NOT NULL,
	`updated_at` integer NOT NULL,
	`ended_at` integer
);
--> statement-breakpoint
CREATE INDEX `rollouts_fleet_agent_idx` ON `rollouts` (`fleet_id`,`agent`,`created_at`);--> statement-breakpoint
CREATE INDEX `rollouts_active_idx` ON `rollouts` (`state`,`updated_at`) WHERE "rollouts"."state" IN ('running', 'paused', 'rolling_back');