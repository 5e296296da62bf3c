/**
 * Everything a rollout tells other bindings, as outbox effects (src/objects/kit/outbox.ts): its
 * rollout and target rows in D1, audit rows, the (fleet, agent) lock, its writes into the targets'
 * ledgers, reboot slots from the fleet's coordinator, and moves of the fleet's channel. Each is
 * stored with the change that causes it and delivered at least once; every receiver is idempotent,
 * and what an effect writes is built from the rollout's state when it is delivered.
 */
import { and, eq, getTableColumns, sql } from "drizzle-orm";
import { auditInsertOnce, type AuditEvent } from "../db/audit";
import { getDb, type Db } from "../db/client";
import { rolloutLocks, rollouts, rolloutTargets } from "../db/schema";
import type { Env } from "../env";
import { fleetSettings } from "../fleets/store";
import type { FleetSettings } from "../model/fleet";
import type { Effect } from "../objects/kit/outbox";
import { coordinatorOf, lane, ledgerOf } from "../objects/stubs";
import { webhookEventEffect } from "../webhooks/outbox";
import { feedEffect, type NoticeInput } from "../notices/notices";
import { moveChannel, restoreChannel, serversAtImage } from "./channel";
import { imageByNameVersion } from "../images/store";
import { catalogFieldsOf } from "../images/service";
import type { Core, RolloutSpec } from "./machine";
import { applied } from "./outcomes";
import { channelServersFound } from "./operator";
import type { EffectKind, RolloutParts } from "./parts";
import { slotAnswered } from "./starting";
import type { DirtyTarget } from "./target-rows";
import { project } from "./transitions";

/** Target rows per D1 projection batch; the rest follow in the next. */
const PROJECT_ROWS = 400;
/**
 * The JSON of target rows one upsert carries, in characters (one parameter, read by json_each: D1
 * binds at most 100 parameters a statement, which at 12 columns a row was 8 rows to an upsert).
 * Kept well under D1's 100 KB a statement even were every character three bytes.
 */
const TARGET_JSON_PER_STATEMENT = 30_000;
/** Ledger writes and slot requests delivered at once. */
export const CALL_CONCURRENCY = 32;
/** How long the fleet's settings read from D1 serve slot requests. */
const SETTINGS_TTL_MS = 30_000;

/** The reboot-slot holder id of a rollout's target: operators see the rollout in it. */
const slotHolderId = (rolloutId: string, serverId: string) => `rollout:${rolloutId}:${serverId}`;

type Target = { pass: number; server_id: string };

export function rolloutEffects(env: () => Env, parts: () => RolloutParts): Record<EffectKind, Effect> {
  const db = () => getDb(env().DB);
  /** The target changes of the projection under way, marked taken once D1 committed them. */
  let inFlight: Pick<DirtyTarget, "pass" | "server_id" | "dirty">[] = [];
  /** Where the first pass's rows not yet in the index start once it committed (undefined: none went). */
  let createdThrough: number | null | undefined;
  let settingsMemo: { at: number; value: FleetSettings } | null = null;

  /** The fleet's settings the coordinator needs, read from D1 at most every SETTINGS_TTL_MS. */
  async function settingsOf(fleet: string): Promise<FleetSettings> {
    const now = parts().clock();
    if (settingsMemo && now - settingsMemo.at < SETTINGS_TTL_MS) return settingsMemo.value;
    const row = await db().query.fleets.findFirst({ where: (f, { eq }) => eq(f.id, fleet) });
    if (!row) throw new Error(`fleet '${fleet}' is gone`);
    settingsMemo = { at: parts().clock(), value: fleetSettings(row) };
    return settingsMemo.value;
  }

  return {
    audit: { target: "d1", statements: (e: AuditEvent) => [auditInsertOnce(db(), e)] },
    // Webhooks: started, paused, resumed, ended, slow servers, for the fleet's coordinator.
    webhook_event: webhookEventEffect(env),
    // The console's live notice (src/notices/notices.ts), raised when the projection landed.
    feed: feedEffect(env),
    project: {
      target: "d1",
      statements: () => {
        const p = parts();
        const state = p.store.load();
        if (!state) return [];
        const rows = p.store.targets.dirty(PROJECT_ROWS);
        inFlight = rows.map((r) => ({ pass: r.pass, server_id: r.server_id, dirty: r.dirty }));
        // The first pass's rows the index has not taken, in seq order, fill the rest of the batch
        // (a target also changed since goes once, with its mark).
        const from = p.store.indexFrom();
        createdThrough = undefined;
        if (from !== null && rows.length < PROJECT_ROWS) {
          const created = p.store.targets.fromSeq(from, PROJECT_ROWS - rows.length);
          const marked = new Set(rows.map((r) => `${r.pass}:${r.server_id}`));
          rows.push(...created.filter((r) => !marked.has(`${r.pass}:${r.server_id}`)));
          createdThrough = created.length < PROJECT_ROWS - inFlight.length ? null : created.at(-1)!.seq + 1;
        }
        return projection(db(), state.spec, state.core, rows, p.clock());
      },
      delivered: () => {
        const p = parts();
        p.store.targets.projected(inFlight);
        if (createdThrough !== undefined) p.store.setIndexFrom(createdThrough);
        // The index shows the rollout as it is now: open console pages re-read it.
        const spec = p.store.load()?.spec;
        if (spec)
          p.outbox.enqueue(
            "feed",
            { fleet: spec.fleet, kind: "rollout", ids: [spec.id], from: `rollout:${spec.id}` } satisfies NoticeInput,
            { key: "feed" },
          );
        const more = inFlight.length === PROJECT_ROWS || (createdThrough !== undefined && createdThrough !== null);
        inFlight = [];
        createdThrough = undefined;
        if (more) project(p);
      },
    },
    unlock: {
      target: "d1",
      statements: () => {
        const { store } = parts();
        const { spec } = store.load()!;
        // Only while still terminal: a rollback may have claimed the lock again meanwhile.
        if (!store.unlocked()) return [];
        const mine = and(
          eq(rolloutLocks.fleetId, spec.fleet),
          eq(rolloutLocks.agent, spec.agent),
          eq(rolloutLocks.rolloutId, spec.id),
        );
        return [db().delete(rolloutLocks).where(mine)];
      },
    },
    lock: {
      target: "d1",
      statements: () => {
        const { store, clock } = parts();
        const { spec } = store.load()!;
        if (store.unlocked()) return [];
        return [
          db()
            .insert(rolloutLocks)
            .values({ fleetId: spec.fleet, agent: spec.agent, rolloutId: spec.id, createdAt: clock() })
            .onConflictDoNothing(),
        ];
      },
    },
    apply: {
      target: "call",
      // One write at a time into a server's ledger: a pass-0 write under way (past its check that
      // the target still applies) finishes before the pass-1 write to the same ledger starts. A
      // pass-0 retry handed over after the pass-1 write finds its target done and writes nothing.
      // A call past its deadline frees the lane early (see Pool): the ledger answers a late pass-0
      // write with the pass-1 write it holds (decideApply); a write overtaken by a later one of the
      // next rollout or of an operator (ordered by its `sent_at`) writes nothing and is answered
      // `superseded`, which skips its target should this rollout still wait on it.
      lane: ({ server_id }: Target) => lane.ledger(server_id),
      deliver: async ({ pass, server_id }: Target, signal: AbortSignal) => {
        const p = parts();
        const { spec } = p.store.load()!;
        const t = p.store.targets.get(pass, server_id);
        if (!t || t.state !== "applying" || t.generation !== null) return;
        // Read with the check, before any wait: while the target applies this rollout holds the
        // (fleet, agent), so every write of the next rollout of the agent is sent later.
        const sent_at = p.clock();
        const write = {
          rollout_id: spec.id,
          pass,
          agent: spec.agent,
          image: t.image,
          version: t.version,
          catalog: await catalogFor(env(), spec, t),
          sent_at,
          // Not written by the forward pass: only while its image is still the one the channel gave.
          ...(t.via_channel && {
            from_channel: { image: spec.image, version: spec.version, since: spec.created_at },
          }),
        };
        const outcome = await ledgerOf(env(), server_id).applyRolloutImage(write);
        // Past the outbox's deadline the attempt failed and is retried: the retry's answer counts.
        signal.throwIfAborted();
        applied(p, pass, server_id, outcome);
      },
    },
    slot: {
      target: "call",
      deliver: async ({ pass, server_id }: Target, signal: AbortSignal) => {
        const p = parts();
        const { spec } = p.store.load()!;
        const t = p.store.targets.get(pass, server_id);
        if (!t || t.slot !== "requested") return;
        const settings = await settingsOf(spec.fleet);
        const r = await coordinatorOf(env(), spec.fleet).acquireRolloutSlot(settings, {
          holder: slotHolderId(spec.id, t.server_id),
          server_id: t.server_id,
          group: t.reboot_group,
          rollout_id: spec.id,
          reboot_slot: spec.reboot_slot,
        });
        // A late grant taken after the retry's would read as "skipped meanwhile" and give the slot back.
        signal.throwIfAborted();
        slotAnswered(p, pass, server_id, r);
      },
    },
    release: {
      target: "call",
      deliver: async ({ server_id }: { server_id: string }) => {
        const { spec } = parts().store.load()!;
        await coordinatorOf(env(), spec.fleet).releaseRolloutSlot(slotHolderId(spec.id, server_id), spec.id);
      },
    },
    channel: {
      target: "call",
      deliver: async ({ to }: { to: "rollout" | "previous" }, signal: AbortSignal) => {
        const { store } = parts();
        const { spec } = store.load()!;
        const image = { image: spec.image, version: spec.version, catalog: spec.catalog ?? null };
        const record = store.channel();
        if (to === "rollout") {
          const moved = await moveChannel(env(), spec.fleet, spec.agent, image, `rollout:${spec.id}`);
          signal.throwIfAborted();
          store.setChannel(moved);
        } else {
          if (record?.updated && record.previous)
            await restoreChannel(env(), spec.fleet, spec.agent, image, record.previous, `rollout:${spec.id}`);
          // Then, the channel back (or someone else's since), the servers that took the rollout's
          // image from it meanwhile: none is set up with that image any more, so none is missed
          // but for a write the index has not taken yet.
          const back = record?.updated ? record.previous : null;
          const wanted = store.load()!.core.channel_lookup === true && back && !sameImage(back, image);
          const found = wanted ? await serversAtImage(env(), spec.fleet, spec.agent, image) : [];
          signal.throwIfAborted();
          channelServersFound(parts(), found, back);
        }
      },
    },
  };
}

const sameImage = (a: { image: string; version: string }, b: { image: string; version: string }) =>
  a.image === b.image && a.version === b.version;

/** The rollout's row and a batch of its changed target rows, as upserts. */
function projection(d: Db, spec: RolloutSpec, core: Core, rows: DirtyTarget[], now: number) {
  const rolloutRow = {
    id: spec.id,
    fleetId: spec.fleet,
    agent: spec.agent,
    image: spec.image,
    version: spec.version,
    catalog: spec.catalog ?? null,
    state: core.state,
    pass: core.pass,
    counts: core.counts,
    reason: core.reason,
    createdBy: spec.created_by,
    createdAt: spec.created_at,
    updatedAt: now,
    endedAt: core.ended_at,
  };
  const { id: _id, createdBy: _c, createdAt: _a, fleetId: _f, agent: _g, ...changing } = rolloutRow;
  return [
    d.insert(rollouts).values(rolloutRow).onConflictDoUpdate({ target: rollouts.id, set: changing }),
    // Many rows to a statement, as JSON (one parameter).
    ...jsonChunks(rows.map(targetRow), TARGET_JSON_PER_STATEMENT).map((json) =>
      d
        .insert(rolloutTargets)
        .select(targetSelect(spec.id, json, now))
        .onConflictDoUpdate({
          target: [rolloutTargets.rolloutId, rolloutTargets.pass, rolloutTargets.serverId],
          set: {
            state: sql`excluded.state`,
            fromImage: sql`excluded.from_image`,
            generation: sql`excluded.generation`,
            startedAt: sql`excluded.started_at`,
            endedAt: sql`excluded.ended_at`,
            reason: sql`excluded.reason`,
            updatedAt: sql`excluded.updated_at`,
          },
        }),
    ),
  ];
}

/**
 * The values a target row gives the index, by column: `targetRow` puts them in a JSON array in
 * this order, and the upsert reads each by its column's name (`TARGET_SELECT`).
 */
const TARGET_VALUES = [
  ["pass", (r) => r.pass],
  ["serverId", (r) => r.server_id],
  ["hostname", (r) => r.hostname],
  ["state", (r) => r.state],
  ["image", (r) => r.image],
  ["fromImage", (r) => r.from_image],
  ["generation", (r) => r.generation],
  ["startedAt", (r) => r.started_at],
  ["endedAt", (r) => r.ended_at],
  ["reason", (r) => r.reason],
] as const satisfies readonly (readonly [keyof typeof rolloutTargets.$inferInsert, (r: DirtyTarget) => unknown])[];

/** A target's row for the index, as the upsert's json_each reads it: TARGET_VALUES' values. */
const targetRow = (r: DirtyTarget) => TARGET_VALUES.map(([, value]) => value(r));

/**
 * The upsert's SELECT list, one expression per column, named after it and in the order drizzle's
 * insert-from-select lists the table's columns (every one, in schema order, matched to the SELECT
 * by position). Built from the table, so a column added to `rollout_targets` cannot shift the
 * values into the wrong columns; one this upsert has no value for stops the worker at once
 * (every test fails) rather than every projection at delivery.
 */
const TARGET_SELECT = Object.entries(getTableColumns(rolloutTargets))
  // As drizzle leaves out of an insert: columns SQLite generates.
  .filter(([, c]) => !c.generated || c.generated.type === "byDefault")
  .map(([key, c]) => {
    const at = TARGET_VALUES.findIndex(([k]) => k === key);
    if (at < 0 && key !== "rolloutId" && key !== "updatedAt")
      throw new Error(`rollout_targets.${c.name} has no value in the rollout's index upsert`);
    return { key, name: sql.identifier(c.name), at };
  });

/** The SELECT of one upsert of the rows in `json` (an array of `targetRow`s). */
function targetSelect(rolloutId: string, json: string, now: number) {
  const values = TARGET_SELECT.map(({ key, name, at }) => {
    const value =
      key === "rolloutId" ? sql`${rolloutId}` : key === "updatedAt" ? sql`${now}` : sql.raw(`r.value ->> ${at}`);
    return sql`${value} AS ${name}`;
  });
  // `WHERE true`: SQLite would read an upsert's ON after a bare `SELECT … FROM` as a join's.
  return sql`SELECT ${sql.join(values, sql`, `)} FROM json_each(${json}) AS r WHERE true`;
}

/** The rows as JSON arrays of at most `max` characters each (a row longer than that alone). */
function jsonChunks(rows: unknown[], max: number): string[] {
  const out: string[] = [];
  let part: string[] = [];
  let size = 2;
  for (const row of rows) {
    const text = JSON.stringify(row);
    if (part.length && size + text.length + 1 > max) {
      out.push(`[${part.join(",")}]`);
      part = [];
      size = 2;
    }
    part.push(text);
    size += text.length + 1;
  }
  if (part.length) out.push(`[${part.join(",")}]`);
  return out;
}

/**
 * The catalog fields a target's write carries: the rollout's own image as resolved at its
 * creation; a rollback target's earlier image looked up in the catalog by its name and version
 * (none when it is not a ready catalog image: it goes back as the free-form image it was).
 */
async function catalogFor(env: Env, spec: RolloutSpec, t: { image: string; version: string }) {
  if (t.image === spec.image && t.version === spec.version) return spec.catalog ?? null;
  if (!spec.catalog) return null;
  const row = await imageByNameVersion(getDb(env.DB), t.image, t.version);
  return row && row.state === "ready" ? catalogFieldsOf(row) : null;
}
