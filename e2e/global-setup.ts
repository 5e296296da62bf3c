import type { TestProject } from "vitest/node";
import { startLocalServer } from "../scripts/local-server.ts";

declare module "vitest" {
  export interface ProvidedContext {
    hmUrl: string;
    hmAdmin: string;
  }
}

export default async function setup(project: TestProject) {
  // wrangler dev cannot report a parked client's hang-up: parked requests are believed for 2 s
  // (e2e/fleetlock-hangup.test.ts shows what happens after that).
  // --test-scheduled: /__scheduled runs the cron when a test asks (the history's rollup).
  const server = await startLocalServer({ label: "e2e", parkTrustS: 2, devArgs: ["--test-scheduled"] });
  project.provide("hmUrl", server.url);
  project.provide("hmAdmin", server.admin);
  return () => server.stop();
}
