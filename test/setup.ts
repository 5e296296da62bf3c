import { applyD1Migrations, env } from "cloudflare:test";

// Idempotent: applied migrations are recorded and skipped.
await applyD1Migrations(env.DB, env.TEST_MIGRATIONS);
