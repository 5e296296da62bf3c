CREATE TABLE `console_sessions` (
	`id_hash` text PRIMARY KEY NOT NULL,
	`token_id` text NOT NULL,
	`scope` text NOT NULL,
	`csrf` text NOT NULL,
	`sealed_token` text NOT NULL,
	`created_at` integer NOT NULL,
	`expires_at` integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX `console_sessions_expires_idx` ON `console_sessions` (`expires_at`);--> statement-breakpoint
CREATE INDEX `console_sessions_token_idx` ON `console_sessions` (`token_id`);--> statement-breakpoint
CREATE INDEX `servers_fleet_state_status_idx` ON `servers` (`fleet_id`,`state`,`status`,`stale_at`);