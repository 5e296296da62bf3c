/**
 * A fleet's webhooks as operators manage them, inside the object that sends them (pure over its
 * store): create (the secret answered once), list and read (never the secret), delete, the
 * delivery log, and a test delivery.
 */
import { fail, type Failure } from "../objects/kit/result";
import type { WebhookDispatcher } from "./dispatch";
import { fleetEvent, TEST_EVENT } from "./events";
import type { WebhookFormat } from "../domain/enums";
import type { DeliveryRow, Webhook, WebhookStore } from "./store";

export const MAX_WEBHOOKS_PER_FLEET = 20;

export interface WebhookInput {
  url: string;
  events: string[];
  format: WebhookFormat;
  description?: string | null;
  secret: string;
}

export const webhookView = (w: Webhook) => ({
  id: w.id,
  name: w.name ?? null,
  url: w.url,
  events: w.events,
  format: w.format,
  description: w.description,
  created_at: new Date(w.created_at).toISOString(),
  created_by: w.created_by,
});
export type WebhookView = ReturnType<typeof webhookView>;

const iso = (ms: number | null) => (ms == null ? null : new Date(ms).toISOString());
const deliveryView = (d: DeliveryRow) => ({
  id: d.id,
  event_id: d.event_id,
  event: d.event_type,
  status: d.status,
  attempts: d.attempts,
  created_at: new Date(d.created_at).toISOString(),
  last_attempt_at: iso(d.last_attempt_at),
  delivered_at: iso(d.delivered_at),
  last_status: d.last_status,
  last_error: d.last_error,
});

export function createWebhook(
  store: WebhookStore,
  input: WebhookInput,
  actor: string,
  now: number,
): { ok: true; webhook: WebhookView } | Failure {
  if (store.all().length >= MAX_WEBHOOKS_PER_FLEET) {
    return fail("too_many_webhooks", `a fleet has at most ${MAX_WEBHOOKS_PER_FLEET} webhooks; delete one first`);
  }
  const w: Webhook = {
    id: crypto.randomUUID(),
    url: input.url,
    events: [...new Set(input.events)].sort(),
    format: input.format,
    description: input.description ?? null,
    secret: input.secret,
    created_at: now,
    created_by: actor,
  };
  store.put(w);
  return { ok: true, webhook: webhookView(w) };
}

export function getWebhook(store: WebhookStore, id: string): { ok: true; webhook: WebhookView } | Failure {
  const w = store.get(id);
  return w ? { ok: true, webhook: webhookView(w) } : fail("not_found", `webhook '${id}' does not exist in this fleet`);
}

export function deleteWebhook(store: WebhookStore, id: string): { ok: true; webhook: WebhookView } | Failure {
  const w = store.get(id);
  if (!w) return fail("not_found", `webhook '${id}' does not exist in this fleet`);
  store.delete(id);
  return { ok: true, webhook: webhookView(w) };
}

export function deliveriesOf(store: WebhookStore, id: string, limit: number) {
  if (!store.get(id)) return fail("not_found", `webhook '${id}' does not exist in this fleet`);
  return { ok: true as const, items: store.deliveries(id, limit).map(deliveryView) };
}

/** One delivery of this webhook: a test's outcome, read once it has come. */
export function deliveryOf(store: WebhookStore, id: string, deliveryId: string) {
  const d = store.get(id) ? store.delivery(deliveryId) : null;
  if (!d || d.webhook_id !== id)
    return fail("not_found", `webhook '${id}' has no delivery '${deliveryId}' in this fleet`);
  return { ok: true as const, delivery: deliveryView(d) };
}

/** A `webhook.test` event to this webhook alone, queued as any event's; answered with the delivery to watch. */
export function testWebhook(
  store: WebhookStore,
  dispatcher: WebhookDispatcher,
  fleet: string,
  id: string,
  actor: string,
  now: number,
) {
  const w = store.get(id);
  if (!w) return fail("not_found", `webhook '${id}' does not exist in this fleet`);
  const event = fleetEvent(
    fleet,
    TEST_EVENT,
    `webhook:${id}`,
    `Test delivery to ${w.url}, sent by ${actor}`,
    { webhook_id: id, by: actor },
    now,
  );
  const delivery = dispatcher.test(id, event);
  return { ok: true as const, delivery: deliveryView(store.delivery(delivery)!) };
}
