CREATE TABLE `cron_cursors` (
	`name` text PRIMARY KEY NOT NULL,
	`at` integer NOT NULL
);
--> statement-breakpoint
ALTER TABLE `upgrade_steps` ADD `notified_at` integer;--> statement-breakpoint
CREATE INDEX `upgrade_steps_unnotified_idx` ON `upgrade_steps` (`id`) WHERE "upgrade_steps"."notified_at" IS NULL AND "upgrade_steps"."state" != 'running';--> statement-breakpoint
-- Steps finished before this migration owe no event: only steps run from now on are sent.
UPDATE `upgrade_steps` SET `notified_at` = COALESCE(`finished_at`, `started_at`) WHERE `state` != 'running';
