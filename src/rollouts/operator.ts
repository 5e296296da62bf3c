/**
 * What changes a rollout from outside its targets: its start, the operator's controls (pause,
 * resume, cancel, rollback) and the cron's re-drive. Each is one storage turn; the answer waits
 * for what it enqueued to be delivered.
 */
import { fail, type Failure } from "../objects/kit/result";
import { control as decide } from "./controls";
import { finish, newCore, zeroCounts, type Control, type RolloutSpec, type RolloutState } from "./machine";
import { settle, type RolloutParts } from "./parts";
import type { NewTarget } from "./target-rows";
import { pump } from "./starting";
import { afterChange, audit, entered, project, queueRollback, skipQueued } from "./transitions";
import { summary, type RolloutSummary } from "./views";

/** A target as the service selected it from the index. */
export interface TargetInput {
  server_id: string;
  hostname: string;
  reboot_group: string;
  excluded: boolean;
}

/** Creates the rollout and starts its first targets; a repeated call changes nothing. */
export async function start(p: RolloutParts, spec: RolloutSpec, targets: TargetInput[]): Promise<RolloutSummary> {
  if (!p.store.load()) {
    const now = p.clock();
    p.store.transaction(() => {
      const counts = zeroCounts();
      const rows = targets.map((t): NewTarget => {
        const state = t.excluded ? "skipped" : "queued";
        counts[state]++;
        const { server_id, hostname, reboot_group } = t;
        return { server_id, hostname, reboot_group, state, ended_at: t.excluded ? now : null, reason: t.excluded ? "excluded" : null };
      });
      p.store.create(spec, { ...newCore(), counts }, rows);
      p.store.events.add("rollout.running", null, { targets: targets.length, excluded: counts.skipped }, now);
      audit(p, { actor: spec.created_by, action: "rollout.start", details: { ...spec, targets: targets.length, excluded: counts.skipped } });
      if (spec.update_channel) p.outbox.enqueue("channel", { to: "rollout" }, { key: "channel" });
      const done = finish(p.store.load()!.core, now);
      p.store.putCore(done.core);
      if (done.entered) entered(p, done.entered, now);
      pump(p, now);
      afterChange(p);
      project(p);
    });
    await settle(p, true);
  }
  return summary(p);
}

/** pause | resume | cancel | rollback, audited with the operator's name. */
export async function control(p: RolloutParts, action: Control, actor: string): Promise<{ ok: true; summary: RolloutSummary } | Failure> {
  const state = p.store.load();
  if (!state) return fail("not_found", "rollout does not exist");
  const now = p.clock();
  const before = state.core;
  const out = decide(before, action, now);
  if (!out.ok) return fail("invalid_state", out.message, { state: before.state });
  p.store.transaction(() => {
    let core = out.core;
    audit(p, { actor, action: `rollout.${action}`, details: { from: before.state, to: core.state } });
    if (out.newPass) {
      // Queued forward targets will not run; those done go back to the image each had before.
      core = skipQueued(p, { ...core, pass: before.pass }, before.pass, out.skipQueued!, now);
      core = { ...core, pass: out.core.pass, counts: zeroCounts(), slot_requests: core.slot_requests };
      core = queueRollback(p, p.store.targets.done(before.pass), core);
      // The service claimed the (fleet, agent) again; should an earlier release have raced it, this re-claims.
      p.store.setUnlocked(false);
      p.outbox.enqueue("lock", {}, { key: "lock" });
    } else if (out.skipQueued) {
      core = skipQueued(p, core, core.pass, out.skipQueued, now);
    }
    const finished = finish(core, now);
    p.store.putCore(finished.core);
    if (out.entered) entered(p, out.entered, now);
    if (finished.entered) entered(p, finished.entered, now);
    pump(p, now);
    afterChange(p);
    project(p);
  });
  await settle(p, true);
  return { ok: true, summary: summary(p) };
}

/** Cron backstop: re-arms what may have been lost (timers, deliveries) and starts what may start. */
export async function redrive(p: RolloutParts): Promise<{ ok: true; state: RolloutState | null }> {
  const state = p.store.load();
  if (!state) return { ok: true, state: null };
  const now = p.clock();
  const timeoutS = state.spec.server_timeout_s;
  p.store.transaction(() => {
    if (timeoutS) {
      for (const a of p.store.targets.applying()) {
        p.timers.schedule(`timeout:${a.pass}:${a.server_id}`, a.started_at + timeoutS * 1000, null, { noLaterThan: true });
      }
    }
    pump(p, now);
    afterChange(p);
    project(p);
  });
  await settle(p, true);
  return { ok: true, state: p.store.load()!.core.state };
}
