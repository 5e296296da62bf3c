import { cloudflareTest, readD1Migrations } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";

const ADMIN_TOKEN = "test-admin-token";

export default defineConfig(async () => {
  // wrangler.toml requires the secret ADMIN_TOKEN; without a .dev.vars (a fresh clone, CI) wrangler
  // looks for it in the environment and warns once per test file when it is not there. The
  // binding below is what the tests use; this only satisfies that check.
  process.env.ADMIN_TOKEN ??= ADMIN_TOKEN;
  const migrations = await readD1Migrations("./migrations");
  return {
    plugins: [
      cloudflareTest({
        wrangler: { configPath: "./wrangler.toml" },
        miniflare: {
          bindings: { ADMIN_TOKEN, TEST_MIGRATIONS: migrations, LOCAL_COUNTERS: "1", ALLOW_LOOPBACK_HTTP: "1" },
        },
      }),
    ],
    test: {
      include: ["test/**/*.test.ts"],
      setupFiles: ["./test/setup.ts"],
      testTimeout: 30_000,
      // The worker's one-line-per-request access log would drown the test output; tests that
      // check it spy on console.log, which sees every line whatever is printed.
      onConsoleLog: (log: string) => !log.includes('"msg":"request"'),
    },
  };
});
