CREATE TABLE `fleet_tasks` (
	`fleet_id` text NOT NULL,
	`kind` text NOT NULL,
	`rev` integer NOT NULL,
	`created_at` integer NOT NULL,
	`attempts` integer DEFAULT 0 NOT NULL,
	PRIMARY KEY(`fleet_id`, `kind`)
);
--> statement-breakpoint
-- Coordinator wipes still owed by fleets deleted under 0004 carry over (0006 drops the old table).
INSERT INTO `fleet_tasks` (`fleet_id`, `kind`, `rev`, `created_at`, `attempts`)
SELECT `fleet_id`, 'wipe', 1, `removed_at`, `attempts` FROM `fleet_removals`;
