DROP INDEX `servers_fleetlock_id_uq`;--> statement-breakpoint
CREATE INDEX `servers_fleetlock_id_idx` ON `servers` (`fleet_id`,`fleetlock_id`);--> statement-breakpoint
ALTER TABLE `audit_log` ADD `event_id` text;--> statement-breakpoint
CREATE UNIQUE INDEX `audit_log_event_uq` ON `audit_log` (`event_id`);