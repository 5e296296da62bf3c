/**
 * How an owner other than the coordinator (a ledger, a rollout) hands a fleet event to the fleet's
 * coordinator, which sends the webhooks: one outbox effect, `webhook_event`, stored with the change
 * that raised the event and delivered at least once. The event's id is derived from the change
 * (`server.registered:<server id>`, `rollout:<id>:<event row>`), so the coordinator drops a
 * redelivery and every webhook gets the event exactly once.
 */
import type { Env } from "../env";
import type { Effect } from "../objects/kit/outbox";
import { coordinatorOf, lane } from "../objects/stubs";
import { fleetEvent, type FleetEvent, type WebhookEventType } from "./events";

export const webhookEventEffect = (env: () => Env): Effect => ({
  target: "call",
  lane: (e: FleetEvent) => lane.coordinator(e.fleet),
  deliver: async (e: FleetEvent) => {
    await coordinatorOf(env(), e.fleet).fleetEvents([e]);
  },
});

/** An event whose id the caller derived from the change, so its redeliveries are one event. */
export function ownedEvent(
  id: string,
  fleet: string,
  type: WebhookEventType,
  subject: string,
  summary: string,
  data: Record<string, unknown>,
  time: number,
): FleetEvent {
  return fleetEvent(fleet, type, subject, summary, data, time, id);
}
