/**
 * A target's transition and everything it implies, applied in the caller's storage turn: the
 * target row, the core, the event log, its timers, the slot it held, bulk skips, entering a new
 * rollout state (audit, channel), and letting the (fleet, agent) go once nothing is in flight.
 */
import { auditEvent, type AuditEntry } from "../db/audit";
import {
  account,
  isEnded,
  quiescent,
  rollingBack,
  skippedQueued,
  stepTarget,
  type Core,
  type RolloutState,
  type Target,
  type TargetEvent,
} from "./machine";
import type { RolloutParts } from "./parts";
import { warnIfSlow } from "./slow";
import { setNoLaterThan } from "./timer-memo";
import { rolloutWebhook, stateEventType } from "./webhook-events";

/** The timer that sends the batched target changes to the index. */
export const PROJECT_TIMER = "project";

/** How long target changes may wait to reach the index together. */
const PROJECT_EVERY_MS = 1_000;

/** Applies one target event; null (and nothing written) when it does not apply to the target. */
export function change(p: RolloutParts, t: Target, e: TargetEvent, now: number): Target | null {
  const { spec, core } = p.store.load()!;
  const after = stepTarget(t, e);
  if (!after) return null;
  // A step that keeps the target's state and slot (the write's answer: its generation) moves no
  // count, but it moves what the targets' list shows: the version moves with it (a reader caches
  // by it), so the core is rewritten and the waiters woken.
  const counted = after.state !== t.state || after.slot !== t.slot;
  const out = counted
    ? account(core, spec, t, after, now)
    : { core: { ...core, version: core.version + 1 }, skipQueued: undefined, entered: undefined };
  const endedNow = isEnded(after.state) && !isEnded(t.state);
  const duration = isEnded(after.state) && after.started_at !== null ? now - after.started_at : null;
  // The index learns of a target when it is created and when it ends; what is in flight is
  // read from this object (GET …/targets), so the index is not rewritten at every step.
  p.store.targets.write(t, after, duration, endedNow);
  let nextCore = out.core;
  if (t.state !== after.state)
    p.store.events.add(
      `target.${after.state}`,
      after.server_id,
      { pass: after.pass, generation: after.generation, reason: after.reason },
      now,
    );
  if (endedNow) {
    // Why it waited goes with the wait: a target ended while queued or waiting for budget keeps no reason.
    if (t.state === "queued" || t.state === "waiting_budget") p.store.setBlocked(after.pass, after.server_id, null);
    if (after.slot === "held") releaseSlot(p, after.server_id);
    // A target of the forward pass that finishes during the rollback is rolled back too.
    if (after.state === "done" && after.pass < nextCore.pass && rollingBack(nextCore) && after.from_image) {
      nextCore = queueRollback(p, [{ ...after }], nextCore);
    }
  }
  if (out.skipQueued) nextCore = skipQueued(p, nextCore, nextCore.pass, out.skipQueued, now);
  if (nextCore !== core) p.store.putCore(nextCore);
  if (after.state === "done" && t.state !== "done" && duration !== null) {
    p.store.recordDuration(after.pass, duration);
    warnIfSlow(p, after, duration, true, now);
  }
  if (out.entered) {
    entered(p, out.entered, now);
    project(p);
  } else {
    projectSoon(p, now);
  }
  return after;
}

/** Queued targets of a pass become skipped (cancel, abort, rollback); slot requests under way are dropped. */
export function skipQueued(p: RolloutParts, core: Core, pass: number, reason: string, now: number): Core {
  const { n, req, waiting } = p.store.targets.skipQueued(pass, reason, now);
  if (n === 0 && waiting === 0) return core;
  p.store.dropBlockedOfPass(pass);
  p.store.events.add("targets.skipped", null, { pass, count: n + waiting, reason }, now);
  const next = pass === core.pass ? skippedQueued(core, n, waiting) : core;
  return { ...next, slot_requests: next.slot_requests - req };
}

/** Queues rollback-pass targets for those done in the forward pass, back to the image each had. */
export function queueRollback(p: RolloutParts, done: Target[], core: Core): Core {
  const n = done.filter((t) => p.store.targets.addRollback(core.pass, t)).length;
  return { ...core, counts: { ...core.counts, queued: core.counts.queued + n } };
}

/** The rollout entered a state (`resumed`: out of a pause): audited, logged, sent to webhooks, and what it means for the channel. */
export function entered(p: RolloutParts, state: RolloutState, now: number, resumed = false) {
  const { spec, core } = p.store.load()!;
  const row = p.store.events.add(`rollout.${state}`, null, { reason: core.reason, pass: core.pass }, now);
  const type = stateEventType(state, resumed);
  if (type) rolloutWebhook(p, type, row, {}, now);
  audit(p, {
    actor: `rollout:${spec.id}`,
    action: `rollout.${state}`,
    details: { reason: core.reason, counts: core.counts, pass: core.pass },
  });
  if (state === "rolling_back" && spec.update_channel)
    p.outbox.enqueue("channel", { to: "previous" }, { key: "channel" });
}

/** A terminal rollout with nothing in flight lets its (fleet, agent) go. */
export function afterChange(p: RolloutParts) {
  const { core } = p.store.load()!;
  if (quiescent(core) && !p.store.unlocked()) {
    p.store.setUnlocked(true);
    p.outbox.enqueue("unlock", {}, { key: "unlock" });
  }
}

export function audit(p: RolloutParts, entry: Omit<AuditEntry, "target">) {
  p.outbox.enqueue("audit", auditEvent({ ...entry, target: `rollout:${p.store.load()!.spec.id}` }));
}

export function releaseSlot(p: RolloutParts, serverId: string) {
  p.outbox.enqueue("release", { server_id: serverId }, { key: `release:${serverId}` });
}

/** The rollout's row and its changed target rows go to the index now. */
export function project(p: RolloutParts) {
  p.outbox.enqueue("project", {}, { key: "project" });
}

/** Target changes reach the index at most every PROJECT_EVERY_MS, many rows to a batch. */
function projectSoon(p: RolloutParts, now: number) {
  setNoLaterThan(p, PROJECT_TIMER, now + PROJECT_EVERY_MS);
}
