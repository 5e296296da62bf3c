/**
 * What every request passes first, FleetLock and /healthz included: its request id (X-Request-Id
 * taken when it is a sane token, else made; returned in the answer and its error body), its log
 * line (./log.ts) and CORS (./cors.ts). One middleware calling the three in that order, rather
 * than three in the app's chain: each link of hono's chain is an async call of its own, paid by
 * every host report and poll.
 */
import type { Context, MiddlewareHandler } from "hono";
import { requestId } from "hono/request-id";
import { corsForConfiguredOrigins } from "./cors";
import { requestLog } from "./log";
import type { AppEnv } from "./types";

export function edge(actorOf: (c: Context<AppEnv>, route: string | null) => string | null): MiddlewareHandler<AppEnv> {
  const id = requestId();
  const log = requestLog(actorOf);
  const cors = corsForConfiguredOrigins();
  // A preflight's answer is returned, not set: put where hono's chain would have put it, so the
  // log line and the request id see it.
  const corsThen = async (c: Context<AppEnv>, next: () => Promise<void>) => {
    const res = await cors(c, next);
    if (res && !c.finalized) c.res = res;
  };
  // The log answers nothing of its own (a Response only in its type).
  return (c, next) => id(c, () => log(c, () => corsThen(c, next)) as Promise<void>);
}
