CREATE TABLE `fleet_history` (
	`fleet_id` text NOT NULL,
	`at` integer NOT NULL,
	`servers` text NOT NULL,
	`versions` text NOT NULL,
	`reboots` integer NOT NULL,
	`rollouts` integer NOT NULL,
	PRIMARY KEY(`fleet_id`, `at`)
);
--> statement-breakpoint
CREATE INDEX `fleet_history_at_idx` ON `fleet_history` (`at`);