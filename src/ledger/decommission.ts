/**
 * Decommissioning a server (docs/operator-guide.md), over the ledger's store and outbox; the rules themselves are
 * pure, in ./lifecycle.ts. The order goes out in the next generation; the host's acknowledgement
 * (or a forced removal) starts cleanup, whose steps are outbox effects delivered one after the
 * other (./effects.ts): the index first, then the coordinator. When the last one was delivered,
 * the server is removed.
 */
import { fail, type Result } from "../objects/kit/result";
import { audit, project, serverEvent, tokenPayload, type CleanupIndexPayload, type IdentityPayload } from "./effects";
import {
  acknowledges,
  cancelledDesired,
  CLEANUP_STEPS,
  decommissionOrder,
  lifecycleDesired,
  type CleanupStep,
  type LifecycleState,
} from "./lifecycle";
import type { ServerRecord } from "../model/server/record";
import type { LedgerParts } from "./parts";
import { leaveRollouts, noteDesiredChange } from "./rollout-marks";
import type { StoredReport } from "../model/server/schemas";

/**
 * The order goes out in the next generation (terminate for managed servers, uninstall for manual
 * ones only when their last report shows nothing assigned or attached). With `force` (a dead
 * host), cleanup starts at once without the host's acknowledgement. Repeating it changes nothing.
 */
export function decommission(
  d: LedgerParts,
  opts: { actor: string; force?: { reason: string } },
): Result<{ changed: boolean }> {
  const state = d.store.load();
  if (!state) return fail("not_found", "server does not exist");
  const { record, desired, report } = state;
  if (record.state === "removed") {
    return opts.force ? { ok: true, changed: false } : fail("server_removed", "the server is removed");
  }
  const now = d.clock();
  const lc = d.store.lifecycle();
  if (opts.force) {
    if (lc?.cleanup_from !== undefined) return { ok: true, changed: false };
    const forced: LifecycleState = {
      ...(lc ?? {
        order: record.kind === "managed" ? "terminate" : "uninstall",
        generation: desired.generation,
        requested_at: now,
        requested_by: opts.actor,
        previous_agents: desired.agents,
        previous_state: record.state,
        done: [],
      }),
      forced: { by: opts.actor, reason: opts.force.reason },
    };
    d.store.transaction(() => {
      d.store.save({ record: { ...record, state: "decommissioning" } });
      leaveRollouts(d, record.id, now);
      beginCleanup(d, d.store.load()!.record, forced, now);
      audit(d.outbox, {
        actor: opts.actor,
        action: "server.decommission.force",
        target: `server:${record.id}`,
        details: { reason: opts.force!.reason },
      });
    });
    return { ok: true, changed: true };
  }
  if (lc) return { ok: true, changed: false };
  const decision = decommissionOrder(record, report);
  if (decision.kind === "blocked") {
    return fail("uninstall_blocked", `cannot order uninstall of manual server ${record.hostname}: ${decision.why}`, {
      units: decision.units,
      storage: decision.storage,
    });
  }
  const next = lifecycleDesired(desired, decision.order, now);
  const ordered: LifecycleState = {
    order: decision.order,
    generation: next.generation,
    requested_at: now,
    requested_by: opts.actor,
    previous_agents: desired.agents,
    previous_state: record.state,
    done: [],
  };
  d.store.transaction(() => {
    d.store.save({ record: { ...record, state: "decommissioning" }, desired: next });
    d.store.setLifecycle(ordered);
    leaveRollouts(d, record.id, now);
    project(d.outbox);
    audit(d.outbox, {
      actor: opts.actor,
      action: "server.decommission",
      target: `server:${record.id}`,
      details: { order: decision.order, generation: next.generation },
    });
  });
  return { ok: true, changed: true };
}

/** Cancels a decommission the host has not acknowledged: the next generation orders `run` again. */
export function cancelDecommission(d: LedgerParts, actor: string): Result {
  const state = d.store.load();
  if (!state) return fail("not_found", "server does not exist");
  if (state.record.state === "removed") return fail("server_removed", "the server is removed");
  const lc = d.store.lifecycle();
  if (!lc || state.record.state !== "decommissioning")
    return fail("not_decommissioning", "the server is not being decommissioned");
  if (lc.cleanup_from !== undefined) {
    return fail(
      "decommission_acknowledged",
      "the host acknowledged (or removal was forced); cleanup is under way and cannot be cancelled",
    );
  }
  const next = cancelledDesired(state.desired, lc, d.clock());
  d.store.transaction(() => {
    d.store.save({ record: { ...state.record, state: lc.previous_state }, desired: next });
    d.store.setLifecycle(null);
    // The agents given back are a newer choice than a rollout write sent before the cancel (one
    // sent before the decommission, landing only now), as an operator's PUT is: such a write must
    // not take them over. The decommission took the marks; the restored agents are marked anew.
    noteDesiredChange(d, state.record.id, state.desired, next, "operator");
    project(d.outbox);
    audit(d.outbox, {
      actor,
      action: "server.decommission.cancel",
      target: `server:${state.record.id}`,
      details: { generation: next.generation },
    });
  });
  return { ok: true };
}

/** In a report's transaction: the host's acknowledgement starts cleanup. */
export function acknowledgeLifecycle(d: LedgerParts, record: ServerRecord, report: StoredReport, now: number) {
  const lc = d.store.lifecycle();
  if (!lc || lc.cleanup_from !== undefined || !acknowledges(lc, report)) return false;
  beginCleanup(d, record, lc, now);
  audit(d.outbox, {
    actor: `server:${record.id}`,
    action: "server.decommission.acknowledged",
    target: `server:${record.id}`,
    details: { order: lc.order, generation: lc.generation },
  });
  return true;
}

/** Inside a transaction: the token stops at once; the cleanup steps leave through the outbox. */
function beginCleanup(d: LedgerParts, record: ServerRecord, lc: LifecycleState, now: number) {
  const revoked = { ...record, token_hash: "", token_revoked_at: record.token_revoked_at ?? now };
  d.store.save({ record: revoked });
  // The FleetLock identity goes with the next revision, so no older delivery can bring it back.
  d.store.setRebootRev(d.store.rebootRev() + 1);
  advance(d, revoked, { ...lc, cleanup_from: now });
}

/** Inside a transaction: records the progress, then enqueues the next step or removes the server. */
function advance(d: LedgerParts, record: ServerRecord, lc: LifecycleState) {
  d.store.setLifecycle(lc);
  const next = CLEANUP_STEPS.find((s) => !lc.done.includes(s));
  if (next === "index") {
    // It carries the token row's revocation under the token row's key: a rotation still queued is
    // replaced, so none can land after it, and the row is written once. A token revoked before
    // keeps that revocation's time, which the ledger answers for it (./operator.ts revokeToken).
    const token = tokenPayload(record, lc.forced?.by ?? lc.requested_by, record.token_revoked_at ?? lc.cleanup_from!);
    d.outbox.enqueue("cleanup_index", { server_id: record.id, token } satisfies CleanupIndexPayload, { key: "token" });
  } else if (next === "coordinator") {
    const identity = {
      fleetlock_id: null,
      hostname: record.hostname,
      reboot_group: record.reboot_group,
      rev: d.store.rebootRev() || 1,
    };
    d.outbox.enqueue(
      "cleanup_coordinator",
      { fleet_id: record.fleet_id, server_id: record.id, identity } satisfies IdentityPayload,
      {
        key: "cleanup",
      },
    );
  } else {
    d.store.save({ record: { ...record, state: "removed" } });
    project(d.outbox);
    serverEvent(d.outbox, record, "decommissioned", d.clock(), { order: lc.order, forced: lc.forced ?? null });
    audit(d.outbox, {
      actor: lc.forced ? lc.forced.by : `server:${record.id}`,
      action: "server.removed",
      target: `server:${record.id}`,
      details: { order: lc.order, forced: lc.forced ?? null, steps: lc.done },
    });
  }
}

/** The cleanup under way, if any. */
function underWay(d: LedgerParts) {
  const state = d.store.load();
  const lc = d.store.lifecycle();
  return state && lc && lc.cleanup_from !== undefined && state.record.state !== "removed"
    ? { record: state.record, lc }
    : null;
}

/** A cleanup step reached its receiver (the outbox's `delivered` hook): the cleanup moves on. */
export function cleanupDelivered(d: LedgerParts, step: CleanupStep) {
  const cleanup = underWay(d);
  if (!cleanup || cleanup.lc.done.includes(step)) return;
  d.store.transaction(() => advance(d, cleanup.record, { ...cleanup.lc, done: [...cleanup.lc.done, step] }));
}

/**
 * Ledgers of an older format ran cleanup from a timer of their own (storage format 3): one under
 * way continues from its first step not done, through the outbox.
 */
export function resumeCleanup(d: LedgerParts) {
  const cleanup = underWay(d);
  if (cleanup) d.store.transaction(() => advance(d, cleanup.record, cleanup.lc));
}
