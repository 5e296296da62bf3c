CREATE TABLE `upgrade_runs` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`runner` text NOT NULL,
	`state` text NOT NULL,
	`from_version` integer NOT NULL,
	`to_version` integer,
	`took_over_from` integer,
	`started_at` integer NOT NULL,
	`heartbeat_at` integer NOT NULL,
	`finished_at` integer,
	`error` text
);
--> statement-breakpoint
CREATE UNIQUE INDEX `upgrade_runs_one_running_uq` ON `upgrade_runs` (`state`) WHERE "upgrade_runs"."state" = 'running';--> statement-breakpoint
CREATE TABLE `upgrade_state` (
	`id` integer PRIMARY KEY NOT NULL,
	`version` integer NOT NULL,
	`cursor_version` integer,
	`cursor` text,
	`written_by_run` integer NOT NULL,
	`updated_at` integer NOT NULL,
	CONSTRAINT "upgrade_state_singleton" CHECK("upgrade_state"."id" = 1)
);
--> statement-breakpoint
CREATE TABLE `upgrade_steps` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`run_id` integer NOT NULL,
	`version` integer NOT NULL,
	`description` text NOT NULL,
	`runner` text NOT NULL,
	`state` text NOT NULL,
	`chunks` integer DEFAULT 0 NOT NULL,
	`started_at` integer NOT NULL,
	`finished_at` integer,
	`error` text
);
--> statement-breakpoint
CREATE INDEX `upgrade_steps_run_idx` ON `upgrade_steps` (`run_id`);--> statement-breakpoint
-- The data version starts here. A database that already holds fleets was written by the foundation
-- release (version 0) and gets every step; a fresh one holds nothing to upgrade, so it starts at
-- the newest step this migration shipped with (1) and is never drained on its first request.
INSERT INTO `upgrade_state` (`id`, `version`, `written_by_run`, `updated_at`)
SELECT 1, CASE WHEN EXISTS (SELECT 1 FROM `fleets`) THEN 0 ELSE 1 END, 0, CAST(unixepoch('subsec') * 1000 AS INTEGER);
