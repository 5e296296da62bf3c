ALTER TABLE `enrollment_tokens` ADD `idempotency_key` text;--> statement-breakpoint
ALTER TABLE `enrollment_tokens` ADD `request_digest` text;--> statement-breakpoint
CREATE UNIQUE INDEX `enrollment_tokens_idempotency_uq` ON `enrollment_tokens` (`created_by`,`idempotency_key`);