/**
 * What changes a rollout from outside its targets: its start, the operator's controls (pause,
 * resume, cancel, rollback) and the cron's re-drive. Each is one storage turn; the answer to a
 * control or re-drive waits for what it enqueued to be delivered, a start's does not (start).
 */
import { fail, type Failure } from "../objects/kit/result";
import { control as decide } from "./controls";
import { armCancelGrace, armDeadlines } from "./deadlines";
import type { ChannelImage } from "./channel";
import {
  channelTargetsFound,
  finish,
  newCore,
  rollingBack,
  zeroCounts,
  type Control,
  type RolloutSpec,
  type RolloutState,
  type Target,
} from "./machine";
import { settle, type RolloutParts } from "./parts";
import type { Plan } from "./strategy";
import type { NewTarget } from "./target-rows";
import { pump } from "./starting";
import { afterChange, audit, change, entered, project, queueRollback, skipQueued } from "./transitions";
import { summary, type RolloutSummary } from "./views";
import { rolloutWebhook } from "./webhook-events";

/** A target as the service selected it from the index. */
export interface TargetInput {
  server_id: string;
  hostname: string;
  reboot_group: string;
  excluded: boolean;
  /** The phase of the strategy's plan that releases it (none without a strategy). */
  phase?: number;
}

/** Creates the rollout and starts its first targets; a repeated call changes nothing. */
export async function start(
  p: RolloutParts,
  spec: RolloutSpec,
  targets: TargetInput[],
  plan: Plan | null = null,
): Promise<RolloutSummary> {
  if (!p.store.load()) {
    const now = p.clock();
    p.store.transaction(() => {
      const counts = zeroCounts();
      const rows = targets.map((t): NewTarget => {
        const state = t.excluded ? "skipped" : "queued";
        counts[state]++;
        const { server_id, hostname, reboot_group } = t;
        return {
          server_id,
          hostname,
          reboot_group,
          state,
          ended_at: t.excluded ? now : null,
          reason: t.excluded ? "excluded" : null,
          phase: t.phase ?? 0,
        };
      });
      p.store.create(spec, { ...newCore(), counts }, rows, plan);
      const row = p.store.events.add(
        "rollout.running",
        null,
        { targets: targets.length, excluded: counts.skipped },
        now,
      );
      rolloutWebhook(
        p,
        "rollout.started",
        row,
        { targets: targets.length, excluded: counts.skipped, created_by: spec.created_by },
        now,
      );
      audit(p, {
        actor: spec.created_by,
        action: "rollout.start",
        details: { ...spec, targets: targets.length, excluded: counts.skipped },
      });
      if (spec.update_channel) p.outbox.enqueue("channel", { to: "rollout" }, { key: "channel" });
      const done = finish(p.store.load()!.core, now);
      p.store.putCore(done.core);
      if (done.entered) entered(p, done.entered, now);
      pump(p, now);
      afterChange(p);
      project(p);
    });
    // Answered once the rollout is stored, its first targets applying and their writes in the
    // outbox: those writes (up to `concurrency` ledgers, each a round trip) and its index rows
    // leave in the background, and the alarm delivers them should this object die first. The
    // caller sees the rollout at once, from this object; it need not wait on hundreds of ledgers.
    await settle(p, false);
  }
  return summary(p);
}

/** pause | resume | cancel | rollback, audited with the operator's name. */
export async function control(
  p: RolloutParts,
  action: Control,
  actor: string,
): Promise<{ ok: true; summary: RolloutSummary } | Failure> {
  if (!p.store.load()) return fail("not_found", "rollout does not exist");
  const refused = p.store.transaction(() => applyControl(p, action, actor, p.clock()));
  if (refused) return refused;
  await settle(p, true);
  return { ok: true, summary: summary(p) };
}

/**
 * A control applied in the caller's storage turn (an operator's, or the rollout's own rollback
 * after a failed analysis); a refusal writes nothing.
 */
export function applyControl(p: RolloutParts, action: Control, actor: string, now: number): Failure | null {
  const before = p.store.load()!.core;
  const out = decide(before, action, now);
  if (!out.ok) return fail("invalid_state", out.message, { state: before.state });
  let core = out.core;
  audit(p, { actor, action: `rollout.${action}`, details: { from: before.state, to: core.state } });
  if (action === "pause") p.store.setPausedBy({ by: actor, at: now });
  else p.store.setPausedBy(null);
  if (out.newPass) {
    // Queued forward targets will not run; those done go back to the image each had before.
    core = skipQueued(p, { ...core, pass: before.pass }, before.pass, out.skipQueued!, now);
    core = { ...core, pass: out.core.pass, counts: zeroCounts(), slot_requests: core.slot_requests };
    core = queueRollback(p, p.store.targets.done(before.pass), core);
    // The rollout's channel move may have set servers up with its image that are no targets: the
    // pass waits for them (channelServersFound), learnt once the channel is back.
    if (before.pass === 0 && p.store.load()!.spec.update_channel) core = { ...core, channel_lookup: true };
    // The service claimed the (fleet, agent) again; should an earlier release have raced it, this re-claims.
    p.store.setUnlocked(false);
    p.outbox.enqueue("lock", {}, { key: "lock" });
  } else if (out.skipQueued) {
    core = skipQueued(p, core, core.pass, out.skipQueued, now);
  }
  const finished = finish(core, now);
  p.store.putCore(finished.core);
  // Targets still applying are waited for a little while, not for ever: the cancel lets the
  // (fleet, agent) go in bounded time however dead their hosts are.
  if (action === "cancel") armCancelGrace(p, now);
  if (out.entered) entered(p, out.entered, now, before.state === "paused" && action === "resume");
  if (finished.entered) entered(p, finished.entered, now);
  pump(p, now);
  afterChange(p);
  project(p);
  return null;
}

/**
 * The servers that took the rollout's image from the fleet's channel (the index's, once the
 * channel went back to `back`) join the rollback pass as targets going to `back`, in one turn
 * with the end of the lookup. Delivered again after a crash, it finds the lookup over and changes
 * nothing.
 */
export function channelServersFound(
  p: RolloutParts,
  servers: { server_id: string; hostname: string; reboot_group: string }[],
  back: ChannelImage | null,
) {
  const now = p.clock();
  p.store.transaction(() => {
    const { core } = p.store.load()!;
    if (!core.channel_lookup) return;
    // A rollback no longer under way (cancelled, failed meanwhile) starts nothing new.
    const added =
      back && rollingBack(core) ? p.store.targets.addChannelRollback(core.pass, servers, back.image, back.version) : 0;
    const out = channelTargetsFound(core, added, now);
    p.store.putCore(out.core);
    if (added > 0) p.store.events.add("targets.via_channel", null, { pass: core.pass, count: added }, now);
    if (out.entered) entered(p, out.entered, now);
    pump(p, now);
    afterChange(p);
    project(p);
  });
  p.background(settle(p, false));
}

/** Cron backstop: re-arms what may have been lost (timers, deliveries) and starts what may start. */
export async function redrive(p: RolloutParts): Promise<{ ok: true; state: RolloutState | null }> {
  const state = p.store.load();
  if (!state) return { ok: true, state: null };
  const now = p.clock();
  p.store.transaction(() => {
    // What this object remembers of its timers is not trusted here: the backstop is for the
    // timers it may have lost.
    p.store.timersSet.clear();
    // Rollouts stored before every target had a deadline get one now (the default timeout, and
    // the cancel's grace counted from when it was cancelled); a lost timer is set again.
    armDeadlines(p);
    pump(p, now);
    afterChange(p);
    project(p);
  });
  await settle(p, true);
  return { ok: true, state: p.store.load()!.core.state };
}

/**
 * An operator ends one target (named by server id or hostname) that is stuck: a queued target is
 * skipped; one applying is failed (it counts toward the abort rule: the server did not realize
 * the image). Audited; its slot and timer go with it.
 */
export async function endTarget(
  p: RolloutParts,
  server: string,
  actor: string,
  why: string | undefined,
): Promise<{ ok: true; summary: RolloutSummary; target: Target } | Failure> {
  if (!p.store.load()) return fail("not_found", "rollout does not exist");
  const now = p.clock();
  const found = p.store.targets.find(server);
  if (!found) return fail("not_found", `server '${server}' is not a target of this rollout`);
  // A target waiting for the disruption budget has not started either: it may be ended (skipped).
  if (found.state !== "queued" && found.state !== "waiting_budget" && found.state !== "applying") {
    return fail("invalid_state", `the target ${found.hostname} has already ended (${found.state})`, {
      state: found.state,
    });
  }
  const reason = `ended by ${actor}${why ? `: ${why}` : ""}`;
  const ended = p.store.transaction(() => {
    let after: Target | null;
    if (found.state === "applying") {
      // Its write may be out (or on its way): failed, never "skipped", which would say it was not.
      after = change(p, found, { type: "fail", reason, at: now }, now);
    } else {
      // A slot asked for is given up first (a grant arriving later is handed back).
      const t = found.slot === "requested" ? (change(p, found, { type: "slot_refused" }, now) ?? found) : found;
      after = change(p, t, { type: "skip", reason, at: now }, now);
    }
    audit(p, {
      actor,
      action: "rollout.target.end",
      details: {
        server_id: found.server_id,
        hostname: found.hostname,
        pass: found.pass,
        from: found.state,
        reason: why ?? null,
      },
    });
    pump(p, now);
    afterChange(p);
    project(p);
    return after!;
  });
  await settle(p, true);
  return { ok: true, summary: summary(p), target: ended };
}
