/**
 * Starting targets: as many queued targets as concurrency allows, in order. A reboot_slot rollout,
 * or one in a fleet with a disruption budget, asks the fleet's coordinator for each target's slot
 * (or its unit of the budget) first. A slot refused for the group (full, paused, outside its
 * windows) is asked for again after SLOT_RETRY_MS; a request for a group the coordinator does not
 * know fails the target. A target refused for the budget waits as `waiting_budget`, with no timer:
 * the coordinator wakes the rollout through its outbox when the budget frees (budgetFreed).
 */
import type { BlockedBy } from "../model/blocked-by";
import { armTimeout } from "./deadlines";
import { startable, type Target } from "./machine";
import { settle, type RolloutParts } from "./parts";
import { progress, releasable } from "./phases";
import { scheduleSlowCheck } from "./slow";
import { afterChange, change, releaseSlot } from "./transitions";
import { rolloutWebhook } from "./webhook-events";

/** A refused reboot slot is asked for again after this long. */
const SLOT_RETRY_MS = 5_000;

/** Whether the rollout's targets ask the coordinator before they start. */
const asks = (spec: { reboot_slot: boolean; budget?: boolean }) => spec.reboot_slot || spec.budget === true;

/**
 * Starts as many queued targets as concurrency allows (asking for slots first where it must).
 * Returns whether it started any (and so set the slow-server timer for them).
 */
export function pump(p: RolloutParts, now: number): boolean {
  const state = p.store.load();
  if (!state) return false;
  // A strategy's phase may have ended (or begun) with the change that calls this.
  progress(p, now);
  const n = startable(state.core, state.spec);
  if (n <= 0) return false;
  const maxPhase = releasable(p, now);
  if (maxPhase === -1) return false;
  let started = false;
  for (const t of p.store.targets.nextQueued(state.core.pass, now, n, maxPhase ?? undefined)) {
    if (asks(state.spec)) {
      if (change(p, t, { type: "slot_requested" }, now)) {
        p.outbox.enqueue("slot", { pass: t.pass, server_id: t.server_id }, { key: `slot:${t.pass}:${t.server_id}` });
      }
    } else {
      started = begin(p, t, now) || started;
    }
  }
  // Once for all the targets started: the timer follows the oldest applying one.
  if (started) scheduleSlowCheck(p);
  // Targets waiting out a slot refusal are tried again when the earliest may.
  if (asks(state.spec) && startable(p.store.load()!.core, state.spec) > 0) {
    const next = p.store.targets.nextSlotRetry(state.core.pass, now);
    if (next !== null) p.scheduler.schedule("pump", next, null, { noLaterThan: true });
  }
  return started;
}

/**
 * queued → applying: the ledger write leaves through the outbox, the timeout starts. The caller
 * sets the slow-server timer (scheduleSlowCheck) once the targets it starts have started.
 */
function begin(p: RolloutParts, t: Target, now: number): boolean {
  if (!change(p, t, { type: "start", at: now }, now)) return false;
  // Only a target that asked can have been told to wait (budgetChanged clears the reasons of
  // those that stop asking): a rollout that never asks deletes no key per target.
  if (asks(p.store.load()!.spec)) p.store.setBlocked(t.pass, t.server_id, null);
  // No key: a target starts once (queued → applying), so its write is never enqueued twice, and
  // a key's index entry would be one more row written per target.
  p.outbox.enqueue("apply", { pass: t.pass, server_id: t.server_id });
  // Always a deadline (DEFAULT_SERVER_TIMEOUT_S when the rollout named none): a dead host must
  // not hold the rollout, nor its (fleet, agent), for ever.
  armTimeout(p, now);
  return true;
}

/** The retry time has come for the refused slot requests: all of them may ask again. */
export function retrySlots(p: RolloutParts) {
  p.store.transaction(() => {
    p.store.targets.endSlotWaits();
    pump(p, p.clock());
  });
}

/**
 * The fleet's coordinator says the disruption budget freed: every target of the current pass
 * waiting for it is queued again and asks (in order, as concurrency allows). Idempotent.
 */
export function budgetFreed(p: RolloutParts): { ok: true; requeued: number } {
  const now = p.clock();
  let requeued = 0;
  p.store.transaction(() => {
    const state = p.store.load();
    if (!state) return;
    for (const t of p.store.targets.waitingBudget(state.core.pass))
      if (change(p, t, { type: "budget_freed" }, now)) requeued++;
    pump(p, now);
  });
  p.background(settle(p, false));
  return { ok: true, requeued };
}

/**
 * The fleet's disruption budget was set or removed while the rollout runs: from now on its
 * targets ask for a unit before they start (or no longer do, and those waiting for one are queued
 * again). Targets already applying took none and are not counted until they end. Unchanged: no
 * write. Idempotent, so the settings push that calls it may repeat.
 */
export function budgetChanged(p: RolloutParts, on: boolean): { ok: true; changed: boolean } {
  const state = p.store.load();
  if (!state || (state.spec.budget === true) === on) return { ok: true, changed: false };
  const now = p.clock();
  p.store.transaction(() => {
    p.store.setBudget(on);
    if (!on) {
      for (const t of p.store.targets.waitingBudget(state.core.pass)) change(p, t, { type: "budget_freed" }, now);
      // Targets that no longer ask are no longer told to wait: their reasons go now, as they
      // would have when each started (begin clears them only for a rollout that asks).
      if (!asks(p.store.load()!.spec)) p.store.dropBlockedOfPass(state.core.pass);
    }
    pump(p, now);
  });
  p.background(settle(p, false));
  return { ok: true, changed: true };
}

export type SlotAnswer = { ok: true } | { ok: false; kind: string; value: string; blocked_by?: BlockedBy[] };

/** What a slot refusal of the group (not the budget) means to a waiting target. */
function slotBlock(r: { kind: string; value: string }, retryAt: number): BlockedBy {
  const kind =
    r.kind === "group_paused" ? "paused" : r.kind === "outside_maintenance_window" ? "window" : ("slots" as const);
  return { kind, message: r.value, until: new Date(retryAt).toISOString(), detail: r.kind };
}

/** The coordinator's answer to a slot request. */
export function slotAnswered(p: RolloutParts, pass: number, serverId: string, r: SlotAnswer) {
  const now = p.clock();
  p.store.transaction(() => {
    const t = p.store.targets.get(pass, serverId);
    if (!t || t.slot !== "requested" || t.state !== "queued") {
      // Skipped meanwhile (cancel, abort): give back what was granted.
      if (r.ok) releaseSlot(p, serverId);
      return;
    }
    if (r.ok) {
      if (begin(p, t, now)) scheduleSlowCheck(p);
    } else if (r.kind === "unknown_group") {
      change(p, t, { type: "slot_refused" }, now);
      change(
        p,
        p.store.targets.get(pass, serverId)!,
        { type: "fail", reason: `no reboot slot: ${r.value}`, at: now },
        now,
      );
      pump(p, now);
      afterChange(p);
    } else if (r.kind === "budget_exhausted") {
      // No timer: the coordinator recorded this rollout as waiting and wakes it (budgetFreed).
      const blocked = r.blocked_by ?? [{ kind: "budget" as const, message: r.value }];
      change(p, t, { type: "budget_wait", reason: r.value }, now);
      p.store.setBlocked(pass, serverId, blocked);
      const row = p.store.events.add("target.waiting_budget", serverId, { blocked_by: blocked }, now);
      rolloutWebhook(
        p,
        "rollout.target_waiting",
        row,
        { server_id: serverId, hostname: t.hostname, blocked_by: blocked, message: `${t.hostname} waits: ${r.value}` },
        now,
      );
      // The freed place goes to the next queued target (another zone may go).
      pump(p, now);
    } else {
      change(p, t, { type: "slot_refused" }, now);
      p.store.targets.deferSlot(pass, serverId, now + SLOT_RETRY_MS);
      p.store.setBlocked(pass, serverId, [slotBlock(r, now + SLOT_RETRY_MS)]);
      p.scheduler.schedule("pump", now + SLOT_RETRY_MS, null, { noLaterThan: true });
      p.store.events.add("target.slot_refused", serverId, { kind: r.kind, value: r.value }, now);
    }
  });
  p.background(settle(p, false));
}
