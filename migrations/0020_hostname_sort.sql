DROP INDEX `servers_fleet_status_hostname_idx`;--> statement-breakpoint
ALTER TABLE `servers` ADD `hostname_sort` text DEFAULT '' NOT NULL;--> statement-breakpoint
CREATE INDEX `servers_fleet_status_sort_idx` ON `servers` (`fleet_id`,`status`,`hostname_sort`,`hostname`,`id`);--> statement-breakpoint
CREATE INDEX `servers_fleet_sort_idx` ON `servers` (`fleet_id`,`hostname_sort`,`hostname`,`id`);--> statement-breakpoint
CREATE INDEX `servers_sort_idx` ON `servers` (`hostname_sort`,`hostname`,`id`);--> statement-breakpoint
-- A fresh database has no servers to give a sort key: it starts at data version 3 (src/upgrades/steps.ts).
UPDATE `upgrade_state` SET `version` = 3 WHERE `version` = 2 AND NOT EXISTS (SELECT 1 FROM `fleets`);
