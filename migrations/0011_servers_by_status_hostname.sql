DROP INDEX `servers_fleet_status_idx`;--> statement-breakpoint
CREATE INDEX `servers_fleet_status_hostname_idx` ON `servers` (`fleet_id`,`status`,`hostname`,`id`);