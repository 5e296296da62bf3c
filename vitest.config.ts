import { cloudflareTest, readD1Migrations } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";

/**
 * The test files that read the local cost meter or its D1 statement counts (/__local/*): they run
 * the local entry (src/local/index.ts: the same worker with its objects passed through the meter).
 * Every other file runs the deployed entry (wrangler.toml's main, src/index.ts), instruments off.
 */
const METERED = [
  "test/meter.test.ts",
  "test/auth.test.ts",
  "test/check-reads.test.ts",
  "test/console-summary.test.ts",
  "test/host-wait.test.ts",
  "test/object-waits.test.ts",
  "test/planning-api.test.ts",
  "test/poll-heartbeat.test.ts",
  "test/projection.test.ts",
  "test/quiet-watch.test.ts",
  "test/specs-cost.test.ts",
  "test/staleness.test.ts",
  "test/images-hosts.test.ts",
  "test/labels.test.ts",
];

const ADMIN_TOKEN = "test-admin-token";

export default defineConfig(async () => {
  // wrangler.toml requires the secret ADMIN_TOKEN; without a .dev.vars (a fresh clone, CI) wrangler
  // looks for it in the environment and warns once per test file when it is not there. The
  // binding below is what the tests use; this only satisfies that check.
  process.env.ADMIN_TOKEN ??= ADMIN_TOKEN;
  // With [secrets] in wrangler.toml, wrangler reads process.env for them and logs "Using secrets
  // defined in process.env" once per test file, at its `log` level (it has no quiet option for
  // the pool's call): its warnings and errors still show. WRANGLER_LOG=log (or debug) brings it back.
  process.env.WRANGLER_LOG ??= "warn";
  const migrations = await readD1Migrations("./migrations");
  const worker = (main?: string) =>
    cloudflareTest({
      wrangler: { configPath: "./wrangler.toml" },
      ...(main ? { main } : {}),
      miniflare: {
        // ACCESS_LOG "on": a line per request, as locally before the deployed default became "writes".
        bindings: {
          ADMIN_TOKEN,
          TEST_MIGRATIONS: migrations,
          ALLOW_LOOPBACK_HTTP: "1",
          ACCESS_LOG: "on",
          // Cloudflare Access as test/sso-access.test.ts publishes it; a request with a bearer token ignores it.
          ACCESS_TEAM_DOMAIN: "hm-test.cloudflareaccess.com",
          ACCESS_AUD: "test-access-aud",
        },
      },
    });
  const shared = { setupFiles: ["./test/setup.ts"], testTimeout: 30_000 };
  return {
    test: {
      // The worker's one-line-per-request access log would drown the test output; tests that
      // check it spy on console.log, which sees every line whatever is printed.
      onConsoleLog: (log: string) => !log.includes('"msg":"request"'),
      projects: [
        { plugins: [worker()], test: { name: "worker", include: ["test/**/*.test.ts"], exclude: METERED, ...shared } },
        { plugins: [worker("./src/local/index.ts")], test: { name: "metered", include: METERED, ...shared } },
      ],
    },
  };
});
