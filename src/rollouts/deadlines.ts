/**
 * When a target applying stops being waited for: its server timeout (the spec's, or
 * DEFAULT_SERVER_TIMEOUT_S for rollouts stored without one), and, once the rollout was
 * cancelled, CANCEL_GRACE_S after the cancel, whichever comes first. Both are the target's one
 * timer (`timeout:<pass>:<server>`), so a cancelled rollout lets its (fleet, agent) go in bounded
 * time however dead its hosts are.
 */
import { CANCEL_GRACE_S, DEFAULT_SERVER_TIMEOUT_S } from "../domain/limits";
import type { RolloutSpec } from "./machine";
import type { RolloutParts } from "./parts";

const timerOf = (pass: number, serverId: string) => `timeout:${pass}:${serverId}`;

const serverTimeoutMs = (spec: Pick<RolloutSpec, "server_timeout_s">) =>
  (spec.server_timeout_s ?? DEFAULT_SERVER_TIMEOUT_S) * 1000;

/** A target that started applying at `startedAt` times out then. */
export function armTimeout(p: RolloutParts, pass: number, serverId: string, startedAt: number) {
  const { spec } = p.store.load()!;
  p.scheduler.schedule(timerOf(pass, serverId), startedAt + serverTimeoutMs(spec), null, { noLaterThan: true });
}

/** Every target still applying is waited for at most CANCEL_GRACE_S after `cancelledAt` (and never longer than its timeout). */
export function armCancelGrace(p: RolloutParts, cancelledAt: number) {
  const { spec } = p.store.load()!;
  for (const a of p.store.targets.applying()) {
    const due = Math.min(a.started_at + serverTimeoutMs(spec), cancelledAt + CANCEL_GRACE_S * 1000);
    p.scheduler.schedule(timerOf(a.pass, a.server_id), due, null, { noLaterThan: true });
  }
}

/** Why a target's timer ended it: the cancel's grace ran out, or its server timeout. */
export function timeoutReason(p: RolloutParts, startedAt: number | null, now: number): string {
  const { spec, core } = p.store.load()!;
  const ownDeadline = (startedAt ?? now) + serverTimeoutMs(spec);
  if (core.state === "cancelled" && now < ownDeadline)
    return `no realizing report within ${CANCEL_GRACE_S} s of the cancel`;
  return `no realizing report within server_timeout_s (${serverTimeoutMs(spec) / 1000} s)`;
}
