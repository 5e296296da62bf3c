CREATE INDEX `servers_fleet_hostname_idx` ON `servers` (`fleet_id`,`hostname`,`id`);--> statement-breakpoint
CREATE INDEX `servers_hostname_idx` ON `servers` (`hostname`,`id`);