/**
 * The rollout events a fleet's webhooks can ask for (src/webhooks/events.ts): raised where the
 * rollout logs the transition, in its turn, and sent through the rollout's outbox to the fleet's
 * coordinator. The id is the rollout's and its event-log row's, so a redelivery is one event.
 */
import { ownedEvent } from "../webhooks/outbox";
import type { WebhookEventType } from "../webhooks/events";
import type { RolloutState } from "./machine";
import type { RolloutParts } from "./parts";

/** The webhook event for a state a rollout entered; `resumed` when it left a pause for it. */
export function stateEventType(state: RolloutState, resumed: boolean): WebhookEventType | null {
  if (resumed && (state === "running" || state === "rolling_back")) return "rollout.resumed";
  switch (state) {
    case "paused":
      return "rollout.paused";
    case "succeeded":
      return "rollout.succeeded";
    // A rollout that ends rolled back did not land its version: it failed (data.state says how).
    case "failed":
    case "rolled_back":
      return "rollout.failed";
    case "cancelled":
      return "rollout.cancelled";
    default:
      return null;
  }
}

/** Enqueues one rollout event for the fleet's webhooks; `row` is its event-log row id. */
export function rolloutWebhook(
  p: RolloutParts,
  type: WebhookEventType,
  row: number,
  data: Record<string, unknown>,
  now: number,
) {
  const { spec, core } = p.store.load()!;
  const what = type.slice("rollout.".length).replace("_", " ");
  const summary =
    typeof data.message === "string"
      ? `Rollout of ${spec.agent} ${spec.version}: ${data.message}`
      : `Rollout of ${spec.agent} ${spec.version} ${what}`;
  const event = ownedEvent(
    `rollout:${spec.id}:${row}`,
    spec.fleet,
    type,
    `rollout:${spec.id}`,
    summary,
    {
      rollout_id: spec.id,
      agent: spec.agent,
      image: spec.image,
      version: spec.version,
      state: core.state,
      pass: core.pass,
      reason: core.reason ?? null,
      counts: core.counts,
      ...data,
    },
    now,
  );
  p.outbox.enqueue("webhook_event", event);
}
