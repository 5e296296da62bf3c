import type { Env } from "./env";
import { createApp } from "./app";
import { errorFields, logLine } from "./lib/log";
import { runScheduled } from "./scheduled";

// The deployed entry: the objects as they are, the Worker's handler as it is. The local entry
// (src/local/index.ts) wraps the same in the cost meter for benchmarks and cost runs.
export { ServerLedger } from "./ledger/durable-object";
export { RebootCoordinator } from "./fleetlock/durable-object";
export { Rollout } from "./rollouts/durable-object";
export { ConsoleFeed } from "./notices/feed-object";

const app = createApp();

export default {
  fetch: app.fetch,
  async scheduled(controller, env, ctx) {
    const started = Date.now();
    ctx.waitUntil(
      runScheduled(controller, env).then(
        () => logLine("info", "scheduled", { cron: controller.cron, duration_ms: Date.now() - started }),
        (err) =>
          logLine("error", "scheduled run failed", {
            cron: controller.cron,
            duration_ms: Date.now() - started,
            ...errorFields(err),
          }),
      ),
    );
  },
} satisfies ExportedHandler<Env>;
