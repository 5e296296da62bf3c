CREATE TABLE `fleet_sso_mappings` (
	`fleet_id` text NOT NULL,
	`kind` text NOT NULL,
	`value` text NOT NULL,
	`scope` text NOT NULL,
	PRIMARY KEY(`fleet_id`, `kind`, `value`)
);
--> statement-breakpoint
CREATE INDEX `fleet_sso_mappings_match_idx` ON `fleet_sso_mappings` (`kind`,`value`);--> statement-breakpoint
CREATE INDEX `audit_log_at_idx` ON `audit_log` (`at`);