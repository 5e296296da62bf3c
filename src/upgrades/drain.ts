import { createMiddleware } from "hono/factory";
import { getDb } from "../db/client";
import { DomainError } from "../domain/errors";
import type { AppEnv } from "../http/types";
import { runUpgrades } from "./runner";
import { errorFields, logLine } from "../lib/log";
import { MigrationsPending, readUpgradeState } from "./state";
import { newestVersion, type UpgradeStep } from "./step";
import { UPGRADE_STEPS } from "./steps";

const RETRY_AFTER_S = 10;
/** A drained isolate kicks a run at most this often; the lease makes extra kicks cheap anyway. */
const KICK_INTERVAL_MS = 5_000;

const MUTATING = new Set(["POST", "PUT", "PATCH", "DELETE"]);

/**
 * Hosts' own endpoints touch only their ledger (and its projection), which upgrades itself, so
 * they go on; so does the operator's "run now". An enrollment registers a server (D1 rows, as
 * POST /v1/servers does), so it waits like a registration.
 */
const exempt = (path: string) =>
  (path.startsWith("/v1/agent/") && path !== "/v1/agent/enroll") || path === "/v1/upgrades/run";

const drainedError = (version: number, newest: number, message?: string) =>
  new DomainError(
    "upgrade_in_progress",
    message ??
      `the data is being upgraded from version ${version} to ${newest}; writes resume when it finishes (GET /v1/upgrades)`,
    { data_version: version, newest_version: newest },
    { retryAfterS: RETRY_AFTER_S },
  );

/**
 * Answers writes with 503 while upgrade steps are pending. The data version only climbs, so once
 * this isolate has seen the newest version it stops asking: one D1 read per write until then,
 * none after. A drained request also kicks a run, so a deploy need not wait for the cron.
 */
export function drainWrites(steps: readonly UpgradeStep[] = UPGRADE_STEPS) {
  const newest = newestVersion(steps);
  let current = false;
  let lastKick = 0;
  return createMiddleware<AppEnv>(async (c, next) => {
    if (current || !MUTATING.has(c.req.method) || exempt(c.req.path)) return next();
    let version: number;
    try {
      version = (await readUpgradeState(getDb(c.env.DB))).version;
    } catch (err) {
      if (err instanceof MigrationsPending) throw drainedError(-1, newest, err.message);
      throw err;
    }
    if (version >= newest) {
      current = true;
      return next();
    }
    const now = Date.now();
    if (now - lastKick >= KICK_INTERVAL_MS) {
      lastKick = now;
      c.executionCtx.waitUntil(
        runUpgrades(c.env, { trigger: "request", steps }).catch((err) =>
          logLine("error", "upgrade run failed", { trigger: "request", ...errorFields(err) }),
        ),
      );
    }
    throw drainedError(version, newest);
  });
}
