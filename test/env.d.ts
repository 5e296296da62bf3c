import type { D1Migration } from "cloudflare:test";
import type { Env as HarbormasterEnv } from "../src/env";

declare global {
  namespace Cloudflare {
    interface Env extends HarbormasterEnv {
      TEST_MIGRATIONS: D1Migration[];
    }
  }
}
