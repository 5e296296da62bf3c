ALTER TABLE `tokens` ADD `fleets` text DEFAULT '"*"' NOT NULL;--> statement-breakpoint
ALTER TABLE `tokens` ADD `description` text;--> statement-breakpoint
ALTER TABLE `tokens` ADD `expires_at` integer;