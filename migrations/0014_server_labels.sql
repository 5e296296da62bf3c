CREATE TABLE `server_labels` (
	`server_id` text NOT NULL,
	`fleet_id` text NOT NULL,
	`key` text NOT NULL,
	`value` text NOT NULL,
	PRIMARY KEY(`server_id`, `key`)
);
--> statement-breakpoint
CREATE INDEX `server_labels_fleet_key_value_idx` ON `server_labels` (`fleet_id`,`key`,`value`,`server_id`);--> statement-breakpoint
ALTER TABLE `servers` ADD `labels` text DEFAULT '{}' NOT NULL;