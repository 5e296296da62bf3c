import { getDb } from "../db/client";
import type { Env } from "../env";
import { listAudit } from "./log";

/** A page of the audit log, newest first, optionally of one target. */
export const searchAudit = (env: Env, opts: { target?: string; before?: number; limit: number }) => listAudit(getDb(env.DB), opts);
