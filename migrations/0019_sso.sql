CREATE TABLE `sso_logins` (
	`state_hash` text PRIMARY KEY NOT NULL,
	`client` text NOT NULL,
	`verifier` text NOT NULL,
	`nonce` text NOT NULL,
	`return_to` text NOT NULL,
	`browser_hash` text,
	`cli_challenge` text,
	`code_hash` text,
	`identity` text,
	`created_at` integer NOT NULL,
	`expires_at` integer NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `sso_logins_code_idx` ON `sso_logins` (`code_hash`);--> statement-breakpoint
CREATE INDEX `sso_logins_expires_idx` ON `sso_logins` (`expires_at`);--> statement-breakpoint
CREATE TABLE `sso_mappings` (
	`id` text PRIMARY KEY NOT NULL,
	`kind` text NOT NULL,
	`value` text NOT NULL,
	`scope` text NOT NULL,
	`fleets` text NOT NULL,
	`description` text,
	`created_by` text NOT NULL,
	`created_at` integer NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `sso_mappings_match_idx` ON `sso_mappings` (`kind`,`value`);--> statement-breakpoint
CREATE TABLE `sso_sessions` (
	`token_id` text PRIMARY KEY NOT NULL,
	`provider` text NOT NULL,
	`subject` text NOT NULL,
	`email` text,
	`client` text NOT NULL,
	`created_at` integer NOT NULL,
	`expires_at` integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX `sso_sessions_expires_idx` ON `sso_sessions` (`expires_at`);