/**
 * Everything a server's ledger tells other bindings, as outbox effects (src/objects/kit/outbox.ts):
 * its D1 projection, its server-token row, its audit rows, its FleetLock identity, the release of
 * reboot slots after a reboot, rollout outcomes, and the cleanup of a decommissioned server. Each
 * is stored with the ledger state change that causes it and delivered at least once; every
 * receiver is idempotent. This is the only way the ledger writes anything outside itself.
 */
import { eq, sql } from "drizzle-orm";
import type { Db } from "../db/client";
import { agentInstances, tokens } from "../db/schema";
import { auditEvent, auditInsertOnce, type AuditEntry, type AuditEvent } from "../db/audit";
import type { Env } from "../env";
import type { ServerIdentity } from "../model/fleet";
import type { Effect, Outbox } from "../objects/kit/outbox";
import type { ServerRecord } from "../model/server/record";
import type { CleanupStep } from "./lifecycle";
import { buildProjection, lastSeenDue, projectionStatements, sameSignatures } from "./projection";
import type { LedgerStore, ProjectedMark } from "./store";
import { rolloutEventEffect } from "../rollouts/ledger-side";
import {
  driftWatchRead,
  driftWatchReturning,
  serverHealthEffect,
  watchedIn,
  type DriftWatch,
} from "../fleetlock/ledger-side";
import { coordinatorOf, lane } from "../objects/stubs";
import { ownedEvent, webhookEventEffect } from "../webhooks/outbox";
import { feedEffect } from "../notices/notices";

export type LedgerEffectKind =
  | "project"
  | "token"
  | "audit"
  | "identity"
  | "member"
  | "release"
  | "rollout_event"
  | "cleanup_index"
  | "cleanup_coordinator"
  | "server_health"
  | "webhook_event"
  | "feed";

export type LedgerOutbox = Outbox<LedgerEffectKind>;

/** The server's token row in D1 (listing, and telling a server token apart on operator routes). */
export interface TokenRowPayload {
  server_id: string;
  name: string;
  hash: string;
  created_by: string;
  created_at: number;
  revoked_at: number | null;
}

export interface IdentityPayload {
  fleet_id: string;
  server_id: string;
  identity: ServerIdentity;
}

/** A reboot seen in a report: slots granted before `seen_at` belong to the previous boot. */
export interface ReleasePayload {
  fleet_id: string;
  server_id: string;
  from_boot_id: string;
  to_boot_id: string;
  seen_at: number;
}

/** Cleanup, first step: the server's instances leave the index and its token row is revoked. */
export interface CleanupIndexPayload {
  server_id: string;
  token: TokenRowPayload;
}

export const tokenPayload = (record: ServerRecord, createdBy: string, revokedAt: number | null): TokenRowPayload => ({
  server_id: record.id,
  name: `server ${record.hostname}`,
  hash: record.token_hash,
  created_by: createdBy,
  created_at: record.created_at,
  revoked_at: revokedAt,
});

/** What the fleet's coordinator counts the disruption budget by (src/fleetlock/disruption.ts). */
export interface MemberPayload {
  fleet_id: string;
  server_id: string;
  hostname: string;
  labels: Record<string, string>;
  at: number;
}

export const memberPayload = (record: ServerRecord, at: number): MemberPayload => ({
  fleet_id: record.fleet_id,
  server_id: record.id,
  hostname: record.hostname,
  labels: record.labels ?? {},
  at,
});

export const identityPayload = (record: ServerRecord, rev: number): IdentityPayload => ({
  fleet_id: record.fleet_id,
  server_id: record.id,
  identity: { fleetlock_id: record.fleetlock_id, hostname: record.hostname, reboot_group: record.reboot_group, rev },
});

/**
 * server.registered / server.decommissioned for the fleet's webhooks, one per server and change:
 * its id is derived from both, so the coordinator sends it once however often it is delivered.
 */
export function serverEvent(
  outbox: LedgerOutbox,
  record: ServerRecord,
  change: "registered" | "decommissioned",
  now: number,
  extra: Record<string, unknown> = {},
) {
  const summary =
    change === "registered" ? `Server ${record.hostname} was registered` : `Server ${record.hostname} was removed`;
  const data = {
    server_id: record.id,
    hostname: record.hostname,
    kind: record.kind,
    reboot_group: record.reboot_group,
    fleetlock_id: record.fleetlock_id,
    ...extra,
  };
  outbox.enqueue(
    "webhook_event",
    ownedEvent(
      `server.${change}:${record.id}`,
      record.fleet_id,
      `server.${change}`,
      `server:${record.id}`,
      summary,
      data,
      now,
    ),
  );
}

/** `deferMs`: delivered with the next flush, or by the alarm after that long (see Outbox.enqueue). */
export const audit = (outbox: LedgerOutbox, entry: AuditEntry, deferMs?: number) =>
  outbox.enqueue("audit", auditEvent(entry), deferMs === undefined ? {} : { deferMs });

/** The index must show the ledger as it is now (one pending projection, whatever caused it). */
export const project = (outbox: LedgerOutbox, deferMs?: number) =>
  outbox.enqueue("project", {}, deferMs === undefined ? { key: "project" } : { key: "project", deferMs });

/**
 * Only a heartbeat is due in the index (its last_seen): offered, not stored (no outbox row, no
 * alarm), since the host's next report brings it again should this delivery be lost — the
 * projection's mark moves only once D1 took it. A stored projection pending delivers it instead.
 */
export const projectHeartbeat = (outbox: LedgerOutbox) => outbox.offer("project", "project");

function tokenRowStatements(d: Db, t: TokenRowPayload) {
  const row = {
    id: t.server_id,
    kind: "server" as const,
    scope: "server" as const,
    serverId: t.server_id,
    name: t.name,
    hash: t.hash || "revoked",
    createdBy: t.created_by,
    createdAt: t.created_at,
    revokedAt: t.revoked_at,
  };
  return d
    .insert(tokens)
    .values(row)
    .onConflictDoUpdate({
      target: tokens.id,
      set: { hash: sql`excluded.hash`, revokedAt: sql`excluded.revoked_at`, name: sql`excluded.name` },
    });
}

/** What the effects are delivered with. */
export interface LedgerEffectWiring {
  env: () => Env;
  db: () => Db;
  clock: () => number;
  store: LedgerStore;
  /** A cleanup step reached its receiver (./decommission.ts takes the cleanup on from there). */
  cleaned: (step: CleanupStep) => void;
  /** Whether the host is watched now, on the channel or by the quiet watch (its index row's staleness is then leased). */
  leased: () => boolean;
  /** The index now shows a change of this server (not a heartbeat): open console pages are told. */
  shown: (fleet: string, serverId: string) => void;
  /** Whether the fleet wants drift-only health events, read in the projection's batch. */
  driftWatch: DriftWatch;
}

export function ledgerEffects(w: LedgerEffectWiring): Record<LedgerEffectKind, Effect> {
  return {
    project: projectEffect(w),
    token: { target: "d1", statements: (t: TokenRowPayload) => [tokenRowStatements(w.db(), t)] },
    audit: { target: "d1", statements: (e: AuditEvent) => [auditInsertOnce(w.db(), e)] },
    identity: {
      target: "call",
      lane: (p: IdentityPayload) => lane.coordinator(p.fleet_id),
      deliver: async (p: IdentityPayload) => {
        await coordinatorOf(w.env(), p.fleet_id).setServerIdentity(p.server_id, p.identity);
      },
    },
    // The disruption budget: the server's hostname and labels, for its fleet's coordinator.
    member: {
      target: "call",
      lane: (p: MemberPayload) => lane.coordinator(p.fleet_id),
      deliver: async (p: MemberPayload) => {
        await coordinatorOf(w.env(), p.fleet_id).serverMember(p.server_id, {
          hostname: p.hostname,
          labels: p.labels,
          at: p.at,
        });
      },
    },
    // Rollouts: a target's outcome, keyed per rollout.
    rollout_event: rolloutEventEffect(w.env),
    // Reboot safety: a new boot, realized, failed or drifted, for the fleet's coordinator.
    server_health: serverHealthEffect(w.env, w.driftWatch),
    // Webhooks: the server registered or removed, for the fleet's coordinator to send.
    webhook_event: webhookEventEffect(w.env),
    // The console's live notice (src/notices/notices.ts), raised when the projection wrote a change.
    feed: feedEffect(w.env),
    release: {
      target: "call",
      lane: (p: ReleasePayload) => lane.coordinator(p.fleet_id),
      deliver: async (p: ReleasePayload) => {
        await coordinatorOf(w.env(), p.fleet_id).releaseServer(p.server_id, {
          reason: `boot_id changed from '${p.from_boot_id}' to '${p.to_boot_id}'`,
          actor: `server:${p.server_id}`,
          granted_before: p.seen_at,
        });
      },
    },
    cleanup_index: {
      target: "d1",
      statements: (p: CleanupIndexPayload) => {
        const d = w.db();
        return [
          d.delete(agentInstances).where(eq(agentInstances.serverId, p.server_id)),
          tokenRowStatements(d, p.token),
        ];
      },
      delivered: () => w.cleaned("index"),
    },
    // It leaves every reboot semaphore and frees its fleetlock_id (at a revision newer than any
    // identity delivery still under way, so none can bring the id back) and its hostname.
    cleanup_coordinator: {
      target: "call",
      lane: (p: IdentityPayload) => lane.coordinator(p.fleet_id),
      deliver: async (p: IdentityPayload) => {
        const coordinator = coordinatorOf(w.env(), p.fleet_id);
        await coordinator.releaseServer(p.server_id, { reason: "server removed", actor: `server:${p.server_id}` });
        await coordinator.setServerIdentity(p.server_id, p.identity);
        await coordinator.releaseHostname(p.server_id, p.identity.hostname);
      },
      delivered: () => w.cleaned("coordinator"),
    },
  };
}

/**
 * The projection: D1 rows for the ledger as it is when delivered, limited to the rows whose
 * content differs from what the index was last told.
 */
function projectEffect(w: LedgerEffectWiring): Effect {
  /** The mark the delivery under way will have made true, recorded once D1 took it. */
  let inFlight: ProjectedMark | null = null;
  /**
   * Whether D1 may hold something newer than the stored mark, so the next delivery writes the full
   * rows rather than the diff against the mark. A mark is stored only after D1 answered; a batch
   * that committed and then failed to answer (a timeout), or a kill between D1's answer and the
   * mark's write, leaves D1 ahead of the mark. The diff then trusts the older mark, and a later
   * report that moves a column back to the mark's value writes nothing: D1 keeps the in-between
   * value (a server "drifted" in lists while its ledger says realized) until something else moves.
   * Both cases are seen from here alone, at no cost in steady state: a delivery after one that
   * built its statements and never heard back (a retry), and the first delivery of this object
   * instance when the row it delivers was stored before the instance started (an earlier instance
   * may have sent it and died before its answer). A row stored by this instance was never sent by
   * another, so an instance woken after an eviction, with nothing pending, keeps writing the diff.
   * Writing every column of the rows the ledger shows makes D1 equal the ledger whatever it held.
   */
  let unsure = false;
  /** When this instance started; rows stored earlier may have been sent by an earlier instance. */
  const startedAt = Date.now();
  /** Set once a delivery of this instance landed: what an earlier instance may have sent is overwritten. */
  let landed = false;
  /** The fleet whose pages show a change the delivery under way writes (null: a heartbeat, or nothing). */
  let changedIn: { fleet: string; server: string } | null = null;
  /** A drift-only health event waits on the fleet's watch: read last in this batch, for nothing more. */
  let watchRead: ((results: unknown[]) => void) | null = null;
  return {
    target: "d1",
    statements: (_payload: unknown, row: { createdAt: number }) => {
      if (inFlight || (!landed && row.createdAt < startedAt)) unsure = true;
      inFlight = null;
      changedIn = null;
      watchRead = null;
      // The index never shows a heartbeat the ledger could lose on eviction.
      w.store.persistHeartbeat();
      const state = w.store.load();
      if (!state) return [];
      const mark = w.store.projected();
      const leased = w.leased();
      const p = buildProjection(state.record, state.desired, state.report, w.clock(), leased);
      const known = mark && !mark.dirty && mark.written ? mark.written : null;
      const written = unsure ? null : known;
      const lastSeen = p.server.lastSeen ?? null;
      const due = lastSeen != null && lastSeenDue(mark, lastSeen, state.record.stale_after_s, leased);
      // A drift-only health event waits on the fleet's watch: read in this batch, on the server
      // row's own statement when it has one (RETURNING), so the read costs no statement of its own.
      const db = w.db();
      const wanted = w.driftWatch.wanted();
      const { statements, serverRow, returnedAt } = projectionStatements(db, p, written, {
        serverRowDue: due,
        ...(wanted ? { returning: driftWatchReturning(state.record.fleet_id) } : {}),
      });
      // A lease ending (the quiet watch found the host silent, or it left the channel) may turn the
      // server stale in the index, and one starting (it is back) live again: pages are told of
      // that too, not only of changed rows.
      const leaseTurned = serverRow && (mark?.leased ?? false) !== leased;
      // Against the mark, not what is written: a full rewrite of what the mark already shows is no
      // change for the pages (they were never told of a value D1 took without answering).
      if (statements.length && (leaseTurned || !known || !sameSignatures(known, p.signatures)))
        changedIn = { fleet: state.record.fleet_id, server: state.record.id };
      inFlight = serverRow
        ? { written: p.signatures, last_seen_written: lastSeen, leased }
        : { written: p.signatures, last_seen_written: mark?.last_seen_written ?? null, leased: mark?.leased ?? false };
      if (!wanted) return statements;
      const read = w.driftWatch.reading();
      if (returnedAt !== null) {
        watchRead = (results) => read(watchedIn(results[returnedAt]));
        return statements;
      }
      watchRead = (results) => read(watchedIn(results.at(-1)));
      return [...statements, driftWatchRead(db, state.record.fleet_id)];
    },
    delivered: (_p: unknown, results: unknown[]) => {
      if (inFlight) {
        w.store.setProjected(inFlight);
        unsure = false;
        landed = true;
      }
      if (changedIn) w.shown(changedIn.fleet, changedIn.server);
      if (watchRead) watchRead(results);
      inFlight = null;
      changedIn = null;
      watchRead = null;
    },
  };
}
