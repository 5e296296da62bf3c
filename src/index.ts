import type { Env } from "./env";
import { createApp } from "./app";
import { errorFields, logLine } from "./lib/log";
import { runScheduled } from "./scheduled";
import { ServerLedger as Ledger } from "./ledger/durable-object";
import { RebootCoordinator as Coordinator } from "./fleetlock/durable-object";
import { Rollout as RolloutObject } from "./rollouts/durable-object";
import { ConsoleFeed as Feed } from "./console/feed-object";
import { metered, meteredWorker } from "./objects/kit/meter";

// The objects and the Worker pass the local cost meter (src/objects/kit/meter.ts), which counts
// only where LOCAL_COUNTERS is "1" and otherwise passes every call straight through.
export class ServerLedger extends metered(Ledger, "ServerLedger") {}
export class RebootCoordinator extends metered(Coordinator, "RebootCoordinator") {}
export class Rollout extends metered(RolloutObject, "Rollout") {}
export class ConsoleFeed extends metered(Feed, "ConsoleFeed") {}

const app = createApp();

export default meteredWorker({
  fetch: app.fetch,
  async scheduled(controller, env, ctx) {
    const started = Date.now();
    ctx.waitUntil(
      runScheduled(controller, env).then(
        () => logLine("info", "scheduled", { cron: controller.cron, duration_ms: Date.now() - started }),
        (err) => logLine("error", "scheduled run failed", { cron: controller.cron, duration_ms: Date.now() - started, ...errorFields(err) }),
      ),
    );
  },
} satisfies ExportedHandler<Env>);
