import type { D1Migration } from "cloudflare:test";

// What the tests' miniflare adds to the worker's generated bindings (vitest.config.ts).
declare global {
  namespace Cloudflare {
    interface Env {
      TEST_MIGRATIONS: D1Migration[];
    }
  }
}
