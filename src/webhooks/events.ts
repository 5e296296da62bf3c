/**
 * The events a fleet's webhooks can ask for (docs/notifications.md), and the shape every
 * owner emits them in. Pure: the owners (the coordinator, ledgers, rollouts) build events, the
 * fleet's coordinator fans them out to the webhooks that want them (./dispatch.ts).
 */

export const WEBHOOK_EVENTS = [
  "rollout.started",
  "rollout.paused",
  "rollout.resumed",
  "rollout.succeeded",
  "rollout.failed",
  "rollout.cancelled",
  "rollout.slow_server",
  /** A target waits (the fleet's disruption budget); data.blocked_by says why. */
  "rollout.target_waiting",
  "rollout.step_started",
  "rollout.analysis_failed",
  "rollout.rolled_back",
  "reboot.granted",
  /** A host parked in its group's queue; data.blocked_by says why. */
  "reboot.queued",
  "reboot.released",
  "reboot.stuck",
  "reboot.gate_closed",
  "reboot.gate_opened",
  "reboot.unhealthy_after_reboot",
  "server.registered",
  "server.stale",
  "server.failed",
  "server.drifted",
  "server.decommissioned",
  "upgrade.step_applied",
  "upgrade.step_failed",
  "audit.recorded",
] as const;
export type WebhookEventType = (typeof WEBHOOK_EVENTS)[number];

/** Sent by POST …/webhooks/{id}/test, whatever the webhook asked for. */
export const TEST_EVENT = "webhook.test";

export interface FleetEvent {
  /** Unique per event: receivers use it to drop a redelivery. */
  id: string;
  type: WebhookEventType | typeof TEST_EVENT;
  fleet: string;
  /** ms since the epoch */
  time: number;
  /** What it is about: `server:<id>`, `group:<name>`, `rollout:<id>`. */
  subject: string;
  /** One line for people (the Slack message). */
  summary: string;
  data: Record<string, unknown>;
}

export function fleetEvent(
  fleet: string,
  type: FleetEvent["type"],
  subject: string,
  summary: string,
  data: Record<string, unknown>,
  time = Date.now(),
  id: string = crypto.randomUUID(),
): FleetEvent {
  return { id, type, fleet, time, subject, summary, data };
}
