import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

// The host agent's suite: its drivers against a real podman and real hook processes, in Node.
// Podman's settings for these machines come from agent/test/containers.conf (runc, no default
// ulimits), given here and never by the agent itself.
export default defineConfig({
  test: {
    include: ["agent/test/**/*.test.ts"],
    // harbormaster-agent, built once per run for the tests that run the real executable.
    globalSetup: ["./agent/test/build-setup.ts"],
    environment: "node",
    env: {
      CONTAINERS_CONF:
        process.env.CONTAINERS_CONF ?? fileURLToPath(new URL("./agent/test/containers.conf", import.meta.url)),
    },
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // Containers are slow to start on a shared 2-core machine: one file at a time.
    fileParallelism: false,
  },
});
