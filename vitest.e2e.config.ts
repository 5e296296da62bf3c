import { defineConfig } from "vitest/config";

// End-to-end tests: Node-side code (the simulator, hm) against a real local server that
// e2e/global-setup.ts starts once (wrangler dev, fresh state, private admin token).
export default defineConfig({
  test: {
    include: ["e2e/**/*.test.ts"],
    environment: "node",
    globalSetup: ["./e2e/global-setup.ts"],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // One server on a 2-core machine: files run one after another.
    fileParallelism: false,
  },
});
