/**
 * Starting targets: as many queued targets as concurrency allows, in order. A reboot_slot rollout
 * asks the fleet's coordinator for each target's slot first; a refused request is asked again
 * after SLOT_RETRY_MS, a request for a group the coordinator does not know fails the target.
 */
import { armTimeout } from "./deadlines";
import { startable, type Target } from "./machine";
import { settle, type RolloutParts } from "./parts";
import { progress, releasable } from "./phases";
import { scheduleSlowCheck } from "./slow";
import { afterChange, change, releaseSlot } from "./transitions";

/** A refused reboot slot is asked for again after this long. */
const SLOT_RETRY_MS = 5_000;

/** Starts as many queued targets as concurrency allows (a reboot_slot rollout asks for slots first). */
export function pump(p: RolloutParts, now: number) {
  const state = p.store.load();
  if (!state) return;
  // A strategy's phase may have ended (or begun) with the change that calls this.
  progress(p, now);
  const n = startable(state.core, state.spec);
  if (n <= 0) return;
  const maxPhase = releasable(p, now);
  if (maxPhase === -1) return;
  for (const t of p.store.targets.nextQueued(state.core.pass, now, n, maxPhase ?? undefined)) {
    if (state.spec.reboot_slot) {
      if (change(p, t, { type: "slot_requested" }, now)) {
        p.outbox.enqueue("slot", { pass: t.pass, server_id: t.server_id }, { key: `slot:${t.pass}:${t.server_id}` });
      }
    } else {
      begin(p, t, now);
    }
  }
  // Targets waiting out a slot refusal are tried again when the earliest may.
  if (state.spec.reboot_slot && startable(p.store.load()!.core, state.spec) > 0) {
    const next = p.store.targets.nextSlotRetry(state.core.pass, now);
    if (next !== null) p.scheduler.schedule("pump", next, null, { noLaterThan: true });
  }
}

/** queued → applying: the ledger write leaves through the outbox, the timeout starts. */
function begin(p: RolloutParts, t: Target, now: number) {
  if (!change(p, t, { type: "start", at: now }, now)) return;
  p.outbox.enqueue("apply", { pass: t.pass, server_id: t.server_id }, { key: `apply:${t.pass}:${t.server_id}` });
  // Always a deadline (DEFAULT_SERVER_TIMEOUT_S when the rollout named none): a dead host must
  // not hold the rollout, nor its (fleet, agent), for ever.
  armTimeout(p, t.pass, t.server_id, now);
  scheduleSlowCheck(p);
}

/** The retry time has come for the refused slot requests: all of them may ask again. */
export function retrySlots(p: RolloutParts) {
  p.store.transaction(() => {
    p.store.targets.endSlotWaits();
    pump(p, p.clock());
  });
}

export type SlotAnswer = { ok: true } | { ok: false; kind: string; value: string };

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
      begin(p, t, now);
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
    } else {
      change(p, t, { type: "slot_refused" }, now);
      p.store.targets.deferSlot(pass, serverId, now + SLOT_RETRY_MS);
      p.scheduler.schedule("pump", now + SLOT_RETRY_MS, null, { noLaterThan: true });
      p.store.events.add("target.slot_refused", serverId, { kind: r.kind, value: r.value }, now);
    }
  });
  p.background(settle(p, false));
}
