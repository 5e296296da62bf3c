import type { FullConfig } from "@playwright/test";
import { freePort, startLocalServer } from "../scripts/local-server.ts";
import { oidcVars, startOidcProvider } from "../e2e/oidc-provider.ts";
import { seed } from "./seed.ts";

/** A private wrangler dev (fresh state, private admin token) with the seeded fleet; the tests read HM_CONSOLE_SEED. */
export default async function globalSetup(_config: FullConfig) {
  // --test-scheduled: /__scheduled runs the cron (the history charts need a rollup).
  // A real OpenID provider beside it: browser/sso.spec.ts signs in through it ("ana" is in group sso-ops).
  const oidcPort = await freePort();
  const issuer = `http://127.0.0.1:${oidcPort}`;
  const server = await startLocalServer({ label: "browser", devArgs: ["--test-scheduled", ...oidcVars(issuer)] });
  const provider = startOidcProvider(oidcPort, server.url, { ana: { email: "ana@example.com", groups: ["sso-ops"] } });
  try {
    process.env.HM_CONSOLE_SEED = JSON.stringify(await seed(server.url, server.admin));
  } catch (err) {
    provider.close();
    server.stop();
    throw err;
  }
  return () => {
    provider.close();
    server.stop();
  };
}
