/**
 * audit.recorded for the fleets' webhooks, so a SIEM subscribes to the trail as it is written.
 * Rows are written by every owner in its own batch; adding a webhook write to each would multiply
 * D1 writes per row. Instead the cron reads the rows after its cursor (D1 `cron_cursors`
 * `audit_events`, the last id handed on) and gives each fleet's coordinator ONE event per tick
 * carrying that fleet's new rows. The cursor moves only when there were rows. The batch's range is
 * fixed in D1 (`audit_events_batch`) before any event leaves, and the event id is derived from the
 * fleet and that range, so a tick repeated after a crash hands on the same rows under the same id,
 * which the coordinator drops. A coordinator that cannot take its event is owed it as a fleet task (as
 * server.stale's are, src/webhooks/stale.ts). Rows that belong to no one fleet (images, builds,
 * upgrades, tokens of several fleets) are in the export and the day files, not in a fleet's hooks.
 */
import { and, eq, inArray, sql } from "drizzle-orm";
import type { BatchItem } from "drizzle-orm/batch";
import { getDb, type Db } from "../db/client";
import { cronCursors, enrollmentTokens, rollouts, servers } from "../db/schema";
import type { Env } from "../env";
import { owedEvents } from "../fleets/store";
import { logLine } from "../lib/log";
import { noticeNow } from "../notices/notices";
import { coordinatorOf } from "../objects/stubs";
import type { FleetEvent } from "../webhooks/events";
import { ownedEvent } from "../webhooks/outbox";
import { auditLinesFrom } from "./service";
import { maxAuditId } from "./store";

export const AUDIT_EVENTS_CURSOR = "audit_events";
/**
 * The last id of the batch being handed on, while one is: written before any event leaves and
 * deleted with the cursor's move, so a tick after a crash between the two hands on exactly the
 * same rows under the same ids, whatever rows were written meanwhile.
 */
const AUDIT_EVENTS_BATCH = "audit_events_batch";
/** Rows per tick; a burst past it goes out over the next ticks, in order. */
const AUDIT_EVENTS_PER_TICK = 500;

export async function sendAuditEvents(
  env: Env,
  now: number,
): Promise<{ rows: number; events: number; notices: Promise<unknown> }> {
  const db = getDb(env.DB);
  const marks = await db
    .select()
    .from(cronCursors)
    .where(inArray(cronCursors.name, [AUDIT_EVENTS_CURSOR, AUDIT_EVENTS_BATCH]));
  const cursor = marks.find((m) => m.name === AUDIT_EVENTS_CURSOR);
  if (!cursor) {
    // The first tick ever starts at the present: the history is in the export, not owed as events.
    const last = await maxAuditId(db);
    await db.insert(cronCursors).values({ name: AUDIT_EVENTS_CURSOR, at: last }).onConflictDoNothing();
    return { rows: 0, events: 0, notices: NONE };
  }
  const pending = marks.find((m) => m.name === AUDIT_EVENTS_BATCH);
  const found = await auditLinesFrom(env, {
    after: cursor.at,
    upTo: pending?.at,
    limit: AUDIT_EVENTS_PER_TICK,
  });
  const lines = found.map((f) => f.line);
  if (lines.length === 0 && !pending) return { rows: 0, events: 0, notices: NONE };
  const upTo = pending?.at ?? lines[lines.length - 1].id;
  if (!pending && !(await claimBatch(db, cursor.at, upTo))) {
    // Another tick took this batch (or already moved the cursor): it hands it on.
    return { rows: 0, events: 0, notices: NONE };
  }
  const fleetOf = await fleetsOf(
    env,
    lines.map((l) => l.target),
  );
  const byFleet = new Map<string, typeof lines>();
  for (const l of lines) {
    const fleet = fleetOf.get(l.target);
    if (fleet) byFleet.set(fleet, [...(byFleet.get(fleet) ?? []), l]);
  }
  // The id names the batch's fixed range, not the rows found in it: a retry is the same event.
  const events: [string, FleetEvent[]][] = [...byFleet].map(([fleet, rows]) => [
    fleet,
    [
      ownedEvent(
        `audit.recorded:${fleet}:${cursor.at + 1}-${upTo}`,
        fleet,
        "audit.recorded",
        `fleet:${fleet}`,
        rows.length === 1
          ? `${rows[0].actor_name ?? rows[0].actor}: ${rows[0].action} ${rows[0].target}`
          : `${rows.length} audit entries`,
        { entries: rows },
        Date.parse(rows[rows.length - 1].at),
      ),
    ],
  ]);
  const results = await Promise.allSettled(events.map(([fleet, e]) => coordinatorOf(env, fleet).fleetEvents(e)));
  const failed = events.filter((_, i) => results[i].status === "rejected");
  if (failed.length)
    logLine("warn", "audit.recorded events not taken; owed to those fleets as tasks the cron retries", {
      fleets: failed.length,
    });
  const writes: BatchItem<"sqlite">[] = failed.map(([fleet, e]) => owedEvents(db, fleet, e, now));
  writes.push(
    db
      .update(cronCursors)
      .set({ at: upTo })
      .where(and(eq(cronCursors.name, AUDIT_EVENTS_CURSOR), eq(cronCursors.at, cursor.at))),
    db.delete(cronCursors).where(and(eq(cronCursors.name, AUDIT_EVENTS_BATCH), eq(cronCursors.at, upTo))),
  );
  await db.batch(writes as [BatchItem<"sqlite">, ...BatchItem<"sqlite">[]]);
  return { rows: lines.length, events: events.length, notices: pagesToTell(env, found) };
}

const NONE: Promise<unknown> = Promise.resolve();

/**
 * A D1-only service (fleet settings, intent, a spec's apply) tells the console's pages of its
 * change with retries in memory, lost with its Worker: the fleets with such rows of their own are
 * told again here. Not for rows an object's outbox delivered (the reboot coordinator's: it sends
 * its notices durably), nor for a fleet whose last row here deleted it (no page to tell). Started
 * once the cursor moved, for the caller to wait on in the background: a slow feed (a notice may
 * be asked to come back after its throttle) holds no tick's cursor. A repeated notice costs a page
 * one re-fetch.
 */
function pagesToTell(env: Env, found: { line: { target: string; action: string }; outboxed: boolean }[]) {
  const last = new Map<string, string>();
  for (const { line, outboxed } of found)
    if (!outboxed && line.target.startsWith("fleet:")) last.set(line.target.slice(6), line.action);
  const fleets = [...last].filter(([, action]) => action !== "fleet.delete").map(([fleet]) => fleet);
  return Promise.all(fleets.map((fleet) => noticeNow(env, { fleet, kind: "fleet", ids: [fleet], from: "cron:audit" })));
}

/**
 * Fixes the batch (cursor, upTo] before any of it leaves: one statement, taken only while the
 * cursor is still where this tick read it and no other batch is under way. False: not taken.
 */
async function claimBatch(db: Db, cursor: number, upTo: number): Promise<boolean> {
  const taken = await db
    .insert(cronCursors)
    .select(
      sql`SELECT ${AUDIT_EVENTS_BATCH}, ${upTo} WHERE EXISTS (SELECT 1 FROM ${cronCursors}
        WHERE ${cronCursors.name} = ${AUDIT_EVENTS_CURSOR} AND ${cronCursors.at} = ${cursor})`,
    )
    .onConflictDoNothing()
    .returning({ at: cronCursors.at });
  return taken.length === 1;
}

/** The fleet of each target that has one: `fleet:<name>`, a server, a rollout, an enrollment token. */
async function fleetsOf(env: Env, targets: string[]): Promise<Map<string, string>> {
  const db = getDb(env.DB);
  const out = new Map<string, string>();
  const idsOf = (prefix: string) => [
    ...new Set(targets.filter((t) => t.startsWith(prefix)).map((t) => t.slice(prefix.length))),
  ];
  for (const t of targets) if (t.startsWith("fleet:")) out.set(t, t.slice(6));
  const [srv, rol, enr] = [idsOf("server:"), idsOf("rollout:"), idsOf("enrollment-token:")];
  const ids = (xs: string[]) => sql`(SELECT value FROM json_each(${JSON.stringify(xs)}))`;
  const [s, r, e] = await db.batch([
    db
      .select({ id: servers.id, fleet: servers.fleetId })
      .from(servers)
      .where(inArray(servers.id, ids(srv))),
    db
      .select({ id: rollouts.id, fleet: rollouts.fleetId })
      .from(rollouts)
      .where(inArray(rollouts.id, ids(rol))),
    db
      .select({ id: enrollmentTokens.id, fleet: enrollmentTokens.fleetId })
      .from(enrollmentTokens)
      .where(inArray(enrollmentTokens.id, ids(enr))),
  ]);
  for (const x of s) out.set(`server:${x.id}`, x.fleet);
  for (const x of r) out.set(`rollout:${x.id}`, x.fleet);
  for (const x of e) out.set(`enrollment-token:${x.id}`, x.fleet);
  return out;
}
