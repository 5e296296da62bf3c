import type { FullConfig } from "@playwright/test";
import { startLocalServer } from "../scripts/local-server.ts";
import { seed } from "./seed.ts";

/** A private wrangler dev (fresh state, private admin token) with the seeded fleet; the tests read HM_CONSOLE_SEED. */
export default async function globalSetup(_config: FullConfig) {
  // --test-scheduled: /__scheduled runs the cron (the history charts need a rollup).
  const server = await startLocalServer({ label: "browser", devArgs: ["--test-scheduled"] });
  try {
    process.env.HM_CONSOLE_SEED = JSON.stringify(await seed(server.url, server.admin));
  } catch (err) {
    server.stop();
    throw err;
  }
  return () => server.stop();
}
