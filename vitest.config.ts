import { cloudflareTest, readD1Migrations } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";

export default defineConfig(async () => {
  const migrations = await readD1Migrations("./migrations");
  return {
    plugins: [
      cloudflareTest({
        wrangler: { configPath: "./wrangler.toml" },
        miniflare: {
          bindings: { ADMIN_TOKEN: "test-admin-token", TEST_MIGRATIONS: migrations, LOCAL_COUNTERS: "1", ALLOW_LOOPBACK_HTTP: "1" },
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
