/**
 * Rollouts (docs/rollouts.md) in the ledger: a rollout writes a target's next generation here, and learns
 * through this ledger's outbox when a report at that generation realizes or fails the agent. The
 * decisions are pure, in src/rollouts/ledger-side.ts; this applies them to the store and outbox.
 */
import { fail, type Failure } from "../objects/kit/result";
import {
  decideApply,
  desiredChangeMarks,
  settleMarks,
  type ApplyOutcome,
  type ApplyRolloutImage,
  type DesiredChooser,
  type RolloutEvent,
} from "../rollouts/ledger-side";
import { audit, project } from "./effects";
import type { LedgerParts } from "./parts";
import type { DesiredState } from "../model/server/record";
import type { StoredReport } from "../model/server/schemas";

/**
 * How long a rollout write's projection and audit row wait for the host's report, whose delivery
 * carries them in its own D1 batch (one projection a target, not two), before the alarm delivers
 * them alone: a host that never reports does not keep them from the index for longer. Longer than
 * the outbox's 10 s safety, which a loaded control plane's hosts often took to report: the alarm
 * then split each target's rows into two batches (4.4-5.3 D1 statements a target instead of 3).
 */
export const ROLLOUT_WRITE_DEFER_MS = 60_000;

/**
 * Writes the next generation with `agent`'s image changed, remembering which rollout wrote it;
 * or answers why not (already at the image, no such agent, server leaving). A redelivery of the
 * same write answers the same generation and writes nothing.
 */
export function applyRolloutImage(
  d: LedgerParts,
  req: ApplyRolloutImage,
): { outcome: ApplyOutcome | Failure; wrote: boolean } {
  const state = d.store.load();
  if (!state) return { outcome: fail("not_found", "server does not exist"), wrote: false };
  const marks = d.store.rolloutMarks();
  const origin = { pinned: d.store.plan().mode === "pinned", created_at: state.record.created_at };
  const decision = decideApply(state.desired, state.record.state, marks[req.agent], req, d.clock(), origin);
  const { next, mark } = decision;
  if (!mark) return { outcome: decision.outcome, wrote: false };
  if (!next) {
    // The agent was already at the image: only the mark is kept, nothing for the index or audit.
    d.store.setRolloutMarks({ ...marks, [req.agent]: mark });
    return { outcome: decision.outcome, wrote: false };
  }
  d.store.transaction(() => {
    d.store.save({ desired: next });
    d.store.setRolloutMarks({ ...marks, [req.agent]: mark });
    project(d.outbox, ROLLOUT_WRITE_DEFER_MS);
    audit(
      d.outbox,
      {
        actor: `rollout:${req.rollout_id}`,
        action: "server.desired.rollout",
        target: `server:${state.record.id}`,
        details: {
          generation: next.generation,
          agent: req.agent,
          image: req.image,
          version: req.version,
          pass: req.pass,
        },
      },
      ROLLOUT_WRITE_DEFER_MS,
    );
  });
  return { outcome: decision.outcome, wrote: true };
}

/**
 * In the storage turn of a desired config a rollout did not write (an operator's PUT or cancelled
 * decommission, a planner's generation): the agents whose image it changed are marked with its time, so a rollout's write
 * sent before it does not undo it when it lands later; and a rollout write it took the agent from,
 * still owed an outcome, is settled `superseded` through the outbox in this same turn (its target
 * is skipped at once, not timed out an hour later).
 */
export function noteDesiredChange(
  d: LedgerParts,
  serverId: string,
  before: DesiredState,
  after: DesiredState,
  by: DesiredChooser,
) {
  const { marks, events } = desiredChangeMarks(d.store.rolloutMarks(), before, after, d.clock(), serverId, by);
  if (marks) d.store.setRolloutMarks(marks);
  for (const e of events) d.outbox.enqueue("rollout_event", e, { key: `rollout:${e.rollout_id}` });
}

/** In the report's storage turn: outcomes leave through the outbox, one pending event per rollout. */
export function settleRolloutMarks(d: LedgerParts, serverId: string, report: StoredReport) {
  const marks = d.store.rolloutMarks();
  if (Object.keys(marks).length === 0) return;
  const { events, remaining } = settleMarks(marks, report, serverId);
  if (events.length === 0) return;
  d.store.setRolloutMarks(remaining);
  for (const e of events) d.outbox.enqueue("rollout_event", e, { key: `rollout:${e.rollout_id}` });
}

/** Decommissioning: each rollout still waiting on this server hears that it left (its target is skipped). */
export function leaveRollouts(d: LedgerParts, serverId: string, now: number) {
  const marks = d.store.rolloutMarks();
  for (const m of Object.values(marks)) {
    if (m.settled) continue;
    const e: RolloutEvent = {
      rollout_id: m.rollout_id,
      pass: m.pass,
      server_id: serverId,
      generation: m.generation,
      outcome: "removed",
      at: now,
    };
    d.outbox.enqueue("rollout_event", e, { key: `rollout:${m.rollout_id}` });
  }
  if (Object.keys(marks).length) d.store.setRolloutMarks({});
}
