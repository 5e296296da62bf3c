import type { Env } from "./env";
import { createApp } from "./http/app";
import { runScheduled } from "./scheduled";

export { ServerLedger } from "./ledger/durable-object";
export { RebootCoordinator } from "./fleetlock/durable-object";
export { Rollout } from "./rollouts/durable-object";

const app = createApp();

export default {
  fetch: app.fetch,
  async scheduled(controller, env, ctx) {
    ctx.waitUntil(runScheduled(controller, env));
  },
} satisfies ExportedHandler<Env>;
