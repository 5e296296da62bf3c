/**
 * The local entry: the deployed worker (src/index.ts) with its objects and its handler passed
 * through the cost meter (./meter.ts) and its D1 taps (./d1-taps.ts), plus two local-only routes.
 * Selected by what measures (`npm run bench`, `node scripts/local-server.ts --metered`, the vitest
 * project "metered"); `npm start`, the tests and `wrangler deploy` run src/index.ts, which none of
 * this touches.
 *   GET /__local/d1-statements  D1 statements sent so far by the Worker and the objects of this
 *                               isolate ({reads, writes}): per isolate, so never on /metrics.
 *   GET /__local/meter          the meter's reading; DELETE reads it and starts a new window.
 */
import type { Env } from "../env";
import worker, * as objects from "../index";
import { d1Counters } from "./d1-taps";
import { metered, meterConsole, meteredWorker, meterReading } from "./meter";

meterConsole();

export class ServerLedger extends metered(objects.ServerLedger, "ServerLedger") {}
export class RebootCoordinator extends metered(objects.RebootCoordinator, "RebootCoordinator") {}
export class Rollout extends metered(objects.Rollout, "Rollout") {}
export class ConsoleFeed extends metered(objects.ConsoleFeed, "ConsoleFeed") {}

const measured = meteredWorker(worker);

export default {
  ...measured,
  fetch(request, env, ctx) {
    const { pathname } = new URL(request.url);
    if (pathname === "/__local/d1-statements" && request.method === "GET") return Response.json({ ...d1Counters });
    if (pathname === "/__local/meter" && (request.method === "GET" || request.method === "DELETE")) {
      return Response.json(meterReading({ reset: request.method === "DELETE" }));
    }
    return measured.fetch!(request, env, ctx);
  },
} satisfies ExportedHandler<Env>;
