/**
 * The fleet's webhook dispatcher, hosted by the fleet's coordinator (one sender per fleet): every
 * owner's event reaches it (the coordinator's own, ledgers' through their outboxes), and each
 * webhook that asked for the event gets one delivery. A delivery is a row in the delivery log and
 * an effect in the coordinator's outbox, both written in the turn of the event, so nothing
 * acknowledged is lost; the outbox sends it at once (within a second) and retries it with its
 * backoff (1 s doubling to 5 min) until the receiver answers 2xx or MAX_DELIVERY_AGE_MS passed.
 * Each request is signed (./signing.ts) and carries the delivery id, which stays the same across
 * retries, so a receiver can drop a duplicate.
 */
import { bodyOf } from "./formats";
import type { FleetEvent } from "./events";
import { signature, SIGNATURE_HEADER } from "./signing";
import type { WebhookStore } from "./store";

/** Retried for up to a day, then given up (recorded as failed). */
const MAX_DELIVERY_AGE_MS = 24 * 3600_000;
/** One attempt's time limit. */
const DELIVERY_TIMEOUT_MS = 10_000;

export interface DeliveryPayload {
  delivery_id: string;
  webhook_id: string;
  event: FleetEvent;
}

/** Puts a delivery in the object's outbox (same turn as the caller's change). */
export type Enqueue = (p: DeliveryPayload) => void;

export type Fetcher = (url: string, init: RequestInit) => Promise<Response>;

export class WebhookDispatcher {
  constructor(
    private readonly store: WebhookStore,
    private readonly enqueue: Enqueue,
    private readonly clock: () => number = () => Date.now(),
    /** Outbound requests; replaced in tests. */
    public fetcher: Fetcher = (u, i) => fetch(u, i),
  ) {}

  /** An event: one delivery per webhook that asked for it. Synchronous: it commits with the change. */
  emit(event: FleetEvent) {
    for (const w of this.store.all()) if (w.events.includes(event.type)) this.queue(w.id, event);
  }

  /**
   * An event another owner sent (its outbox, or the cron), under an id it derived from the change:
   * sent once however often it arrives. Synchronous, like emit.
   */
  take(event: FleetEvent): boolean {
    // Nobody asked for it: nothing to send, nothing to remember (a fleet without webhooks keeps
    // its storage untouched by the cron's stale and upgrade events).
    if (!this.store.all().some((w) => w.events.includes(event.type))) return false;
    if (!this.store.firstSeen(event.id, this.clock())) return false;
    this.emit(event);
    return true;
  }

  /** A test event to one webhook, whatever it asked for. */
  test(webhookId: string, event: FleetEvent): string {
    return this.queue(webhookId, event);
  }

  private queue(webhookId: string, event: FleetEvent): string {
    const id = crypto.randomUUID();
    this.store.addDelivery({ id, webhook_id: webhookId, event_id: event.id, event_type: event.type, created_at: this.clock() });
    this.enqueue({ delivery_id: id, webhook_id: webhookId, event });
    return id;
  }

  /**
   * One attempt, from the outbox. Returns when the delivery is finished (delivered, or given up);
   * throws when it should be tried again, which the outbox does with backoff.
   */
  async deliver(p: DeliveryPayload): Promise<void> {
    const row = this.store.delivery(p.delivery_id);
    if (!row || row.status !== "pending") return; // delivered already (a redelivery), or dropped
    const hook = this.store.get(p.webhook_id);
    if (!hook) return this.store.abandon(p.delivery_id, "the webhook was deleted");
    const now = this.clock();
    if (now - row.created_at > MAX_DELIVERY_AGE_MS) {
      return this.store.abandon(p.delivery_id, `given up after ${MAX_DELIVERY_AGE_MS / 3600_000} h: ${row.last_error ?? "no answer"}`);
    }
    const { body, contentType } = bodyOf(hook.format, p.event);
    const headers = {
      "content-type": contentType,
      "user-agent": "Harbormaster-Webhooks/1",
      "x-harbormaster-event": p.event.type,
      "x-harbormaster-delivery": p.delivery_id,
      [SIGNATURE_HEADER.toLowerCase()]: await signature(hook.secret, body, Math.floor(Date.now() / 1000)),
    };
    let http: number | null = null;
    let error: string | null = null;
    try {
      const res = await this.fetcher(hook.url, { method: "POST", headers, body, redirect: "manual", signal: AbortSignal.timeout(DELIVERY_TIMEOUT_MS) });
      http = res.status;
      if (res.status < 200 || res.status >= 300) error = `HTTP ${res.status}: ${(await res.text().catch(() => "")).slice(0, 200)}`;
      else await res.body?.cancel();
    } catch (err) {
      const e = err as { name?: string; message?: string };
      error = e?.name === "TimeoutError" ? `no answer within ${DELIVERY_TIMEOUT_MS / 1000} s` : String(e?.message ?? err).slice(0, 300);
    }
    this.store.recordAttempt(p.delivery_id, this.clock(), { status: error ? "pending" : "delivered", http, error });
    if (error) throw new Error(`webhook ${hook.id}: ${error}`);
  }
}
