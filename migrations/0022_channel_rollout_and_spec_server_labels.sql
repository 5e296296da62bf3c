CREATE TABLE `spec_server_labels` (
	`fleet_id` text NOT NULL,
	`hostname` text NOT NULL,
	`labels` text NOT NULL,
	`updated_at` integer NOT NULL,
	`updated_by` text NOT NULL,
	PRIMARY KEY(`fleet_id`, `hostname`)
);
--> statement-breakpoint
ALTER TABLE `agent_channels` ADD `rollout` text;