CREATE TABLE `image_deletions` (
	`key` text PRIMARY KEY NOT NULL,
	`upload_id` text,
	`at` integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE `image_parts` (
	`image_id` text NOT NULL,
	`part` integer NOT NULL,
	`etag` text NOT NULL,
	`size` integer NOT NULL,
	`uploaded_at` integer NOT NULL,
	PRIMARY KEY(`image_id`, `part`)
);
--> statement-breakpoint
CREATE TABLE `images` (
	`id` text PRIMARY KEY NOT NULL,
	`name` text NOT NULL,
	`version` text NOT NULL,
	`kind` text NOT NULL,
	`digest` text NOT NULL,
	`size` integer NOT NULL,
	`ref` text,
	`labels` text NOT NULL,
	`description` text,
	`state` text NOT NULL,
	`upload_id` text,
	`part_size` integer,
	`created_at` integer NOT NULL,
	`created_by` text NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `images_name_version_idx` ON `images` (`name`,`version`);--> statement-breakpoint
CREATE INDEX `images_uploading_idx` ON `images` (`created_at`) WHERE "images"."state" = 'uploading';--> statement-breakpoint
ALTER TABLE `agent_channels` ADD `catalog` text;--> statement-breakpoint
ALTER TABLE `fleets` ADD `image_policy` text DEFAULT 'any' NOT NULL;--> statement-breakpoint
ALTER TABLE `rollouts` ADD `catalog` text;