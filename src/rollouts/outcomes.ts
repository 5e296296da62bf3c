/**
 * What the rollout learns about its targets: the ledger's answer to a write, the outcome a report
 * settled (through the ledger's outbox), and a target's timeout. Duplicate, reordered and late
 * news changes nothing (machine.ts's stepTarget answers null for it).
 */
import type { Failure } from "../objects/kit/result";
import type { ApplyOutcome, RolloutEvent } from "./ledger-side";
import { armDeadlines, pastDeadline, timeoutReason } from "./deadlines";
import type { TargetEvent } from "./machine";
import { settle, type RolloutParts } from "./parts";
import { scheduleSlowCheck } from "./slow";
import { pump } from "./starting";
import { afterChange, change } from "./transitions";

/**
 * A target's outcome. Only the event for the generation this rollout wrote, on a target still
 * applying, changes anything: duplicates and reordered or late events are answered `changed: false`.
 */
export async function targetEvent(p: RolloutParts, e: RolloutEvent): Promise<{ ok: true; changed: boolean }> {
  if (!p.store.load()) return { ok: true, changed: false };
  const now = p.clock();
  const changed = p.store.transaction(() => {
    let t = p.store.targets.get(e.pass, e.server_id);
    if (!t) return false;
    // The outcome may overtake the answer to the write: the ledger's generation is the one written.
    if (t.state === "applying" && t.generation === null && e.outcome !== "removed") {
      t = change(p, t, { type: "applied", generation: e.generation, from_image: null, from_version: null }, now) ?? t;
    }
    // superseded: a newer desired config (an operator's, or the planner's after a role change) took
    // the agent off this generation's image before a report showed it; the skip names the
    // generation, the one a write's answer would skip for.
    const ev: TargetEvent =
      e.outcome === "realized"
        ? { type: "realized", generation: e.generation, at: now }
        : e.outcome === "failed"
          ? { type: "failed", generation: e.generation, message: e.message ?? "failed", at: now }
          : e.outcome === "superseded"
            ? { type: "skip", reason: "superseded", generation: e.generation, at: now }
            : { type: "removed", at: now };
    if (change(p, t, ev, now) === null) return false;
    // The timer follows the oldest target applying, which may be the one that just ended: set
    // again once, by pump when it started another.
    if (!pump(p, now)) scheduleSlowCheck(p);
    afterChange(p);
    return true;
  });
  if (changed) await settle(p, false);
  return { ok: true, changed };
}

/** The ledger's answer to a write: generation written, or why the target is skipped. */
export function applied(p: RolloutParts, pass: number, serverId: string, r: ApplyOutcome | Failure) {
  const now = p.clock();
  p.store.transaction(() => {
    const t = p.store.targets.get(pass, serverId);
    if (!t) return;
    let ev: TargetEvent;
    if (!r.ok) ev = { type: "removed", at: now };
    else if (r.outcome === "applied")
      ev = { type: "applied", generation: r.generation, from_image: r.from_image, from_version: r.from_version };
    else if (r.outcome === "removed") ev = { type: "removed", at: now };
    else ev = { type: "skip", reason: r.outcome, at: now };
    if (change(p, t, ev, now) && ev.type !== "applied") {
      pump(p, now);
      afterChange(p);
    }
  });
  p.background(settle(p, false));
}

/**
 * The deadline timer fired: every target applying whose deadline passed times out, and the timer
 * is set for the next deadline (./deadlines.ts).
 */
export function deadlinesDue(p: RolloutParts) {
  const now = p.clock();
  p.store.transaction(() => {
    if (!p.store.load()) return;
    let ended = false;
    for (const due of pastDeadline(p, now)) {
      const t = p.store.targets.get(due.pass, due.server_id);
      if (t && change(p, t, { type: "timeout", at: now, reason: timeoutReason(p, t.started_at, now) }, now))
        ended = true;
    }
    if (ended) {
      pump(p, now);
      afterChange(p);
    }
    armDeadlines(p);
  });
}

/**
 * A timer of one target (named timeout:<pass>:<server_id>), as older code stored them: that
 * target's deadline came. A target that ended meanwhile changes nothing.
 */
export function timedOut(p: RolloutParts, timer: string) {
  const [, pass, serverId] = timer.split(":");
  const now = p.clock();
  p.store.transaction(() => {
    const t = p.store.targets.get(Number(pass), serverId);
    if (t && change(p, t, { type: "timeout", at: now, reason: timeoutReason(p, t.started_at, now) }, now)) {
      pump(p, now);
      afterChange(p);
    }
  });
}
