ALTER TABLE `enrollment_tokens` ADD `labels` text DEFAULT '{}' NOT NULL;--> statement-breakpoint
ALTER TABLE `fleets` ADD `disruption_budget` text;