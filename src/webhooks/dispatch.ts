/**
 * The fleet's webhook dispatcher, hosted by the fleet's coordinator (one sender per fleet): every
 * owner's event reaches it (the coordinator's own, ledgers' through their outboxes), and each
 * webhook that asked for the event gets one delivery. A delivery is a row in the delivery log and
 * a row in the webhooks' own send queue (./store.ts), both written in the turn of the event, so
 * nothing acknowledged is lost.
 *
 * The queue is not the object's outbox: a receiver is an outsider, and one that never answers
 * must not hold up the audit rows, console notices and calls to other objects the outbox carries,
 * nor an operator's write that waits for them. Each webhook's sends go on their own: at most
 * MAX_IN_FLIGHT_PER_WEBHOOK at once per webhook, each retried with its own backoff (1 s doubling
 * to 5 min) until the receiver answers 2xx or MAX_DELIVERY_AGE_MS passed; nobody awaits them (the
 * object keeps them alive with waitUntil). A send under way holds a lease on its row (its time-out
 * and a margin): should the object die mid-send, the alarm sends it again when the lease ends.
 * Each request is signed (./signing.ts) and carries the delivery id, which stays the same across
 * retries, so a receiver can drop a duplicate.
 */
import { textPrefix } from "../lib/body";
import { backoffMs } from "../objects/kit/outbox";
import { bodyOf } from "./formats";
import type { FleetEvent } from "./events";
import { signature, SIGNATURE_HEADER } from "./signing";
import type { WebhookStore } from "./store";

/** Retried for up to a day, then given up (recorded as failed). */
const MAX_DELIVERY_AGE_MS = 24 * 3600_000;
/** One attempt's time limit. */
const DELIVERY_TIMEOUT_MS = 10_000;
/** A queued send's timer, should the send that starts after its turn never run (the object died). */
const SAFETY_MS = 10_000;

export interface DeliveryPayload {
  delivery_id: string;
  webhook_id: string;
  event: FleetEvent;
}

/** Sends to one webhook under way at once; more wait their turn (a hanging receiver holds this many). */
const MAX_IN_FLIGHT_PER_WEBHOOK = 4;
/** A send under way is tried again this long after its time-out, should its answer never be recorded. */
const LEASE_MARGIN_MS = 5_000;
/** Sends started per pass over the queue. */
const SENDS_PER_PASS = 200;

export type Fetcher = (url: string, init: RequestInit) => Promise<Response>;

/** What the dispatcher needs of its host object: its one timer, and keeping a send alive unawaited. */
export interface DispatchHost {
  /** Sets the webhooks' timer to `at` (null: none owed); the host arms its alarm. */
  timer(at: number | null, opts?: { noLaterThan?: boolean }): void;
  waitUntil(p: Promise<unknown>): void;
}

export class WebhookDispatcher {
  /** Sends under way, by delivery id, and how many per webhook. */
  private readonly inFlight = new Map<string, Promise<void>>();
  private readonly perHook = new Map<string, number>();
  private pumpQueued = false;
  /** Bumped when the queue is dropped (the fleet deleted): sends under way then record nothing. */
  private epoch = 0;

  constructor(
    private readonly store: WebhookStore,
    private readonly host: DispatchHost,
    private readonly clock: () => number = () => Date.now(),
    /** Outbound requests; replaced in tests. */
    public fetcher: Fetcher = (u, i) => fetch(u, i),
  ) {}

  /** Whether any of the fleet's webhooks asked for this type: an event nobody wants need not be built. */
  wants(type: FleetEvent["type"]): boolean {
    return this.store.all().some((w) => w.events.includes(type));
  }

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
    this.store.addDelivery({
      id,
      webhook_id: webhookId,
      event_id: event.id,
      event_type: event.type,
      created_at: this.clock(),
    });
    this.adopt({ delivery_id: id, webhook_id: webhookId, event });
    return id;
  }

  /**
   * Queues the send of a delivery already in the log, in the caller's turn: the timer (committed
   * with it) is the safety net, and the send starts as soon as the turn is over.
   */
  adopt(p: DeliveryPayload) {
    const now = Date.now();
    this.store.queueSend(p.delivery_id, p.webhook_id, p, now);
    this.host.timer(now + SAFETY_MS, { noLaterThan: true });
    if (this.pumpQueued) return;
    this.pumpQueued = true;
    queueMicrotask(() => {
      this.pumpQueued = false;
      this.pump();
    });
  }

  /**
   * Starts every due send a webhook has room for, and sets the timer for the next one. Never
   * waits for a receiver: each send finishes on its own and looks at the queue again.
   */
  pump() {
    const now = Date.now();
    for (const r of this.store.dueSends(now, SENDS_PER_PASS)) {
      if (this.inFlight.has(r.delivery_id)) continue;
      const n = this.perHook.get(r.webhook_id) ?? 0;
      if (n >= MAX_IN_FLIGHT_PER_WEBHOOK) continue;
      this.perHook.set(r.webhook_id, n + 1);
      this.store.sendAt(r.delivery_id, now + DELIVERY_TIMEOUT_MS + LEASE_MARGIN_MS);
      const send = this.send(r.delivery_id, JSON.parse(r.payload) as DeliveryPayload, r.attempts, this.epoch).finally(
        () => {
          this.inFlight.delete(r.delivery_id);
          const left = (this.perHook.get(r.webhook_id) ?? 1) - 1;
          if (left > 0) this.perHook.set(r.webhook_id, left);
          else this.perHook.delete(r.webhook_id);
        },
      );
      this.inFlight.set(r.delivery_id, send);
      this.host.waitUntil(send);
    }
    this.host.timer(this.store.nextSendAfter(now));
  }

  /** One send and its outcome: done, or due again after its backoff. Then the queue is looked at again. */
  private async send(id: string, p: DeliveryPayload, attempts: number, epoch: number) {
    let failed = false;
    try {
      await this.deliver(p, epoch);
    } catch {
      failed = true;
    }
    if (epoch !== this.epoch) return;
    try {
      if (failed) this.store.sendAt(id, Date.now() + backoffMs(attempts + 1), attempts + 1);
      else this.store.sent(id);
    } catch (err) {
      console.error(JSON.stringify({ msg: "webhook send outcome not recorded", delivery: id, error: String(err) }));
    }
    queueMicrotask(() => {
      if (epoch === this.epoch) this.pump();
    });
  }

  /** Every send under way has finished (tests). */
  async idle(): Promise<void> {
    while (this.inFlight.size) await Promise.allSettled(this.inFlight.values());
  }

  /**
   * The fleet was deleted: its deliveries still owed are not sent (recorded as failed, "dropped",
   * until the wipe takes the log), and sends under way record nothing. Nothing waits for them.
   */
  drop(why: string): number {
    this.epoch++;
    return this.store.dropSends(why);
  }

  /**
   * One attempt, from the outbox. Returns when the delivery is finished (delivered, or given up);
   * throws when it should be tried again, which the outbox does with backoff.
   */
  async deliver(p: DeliveryPayload, epoch = this.epoch): Promise<void> {
    const row = this.store.delivery(p.delivery_id);
    if (!row || row.status !== "pending") return; // delivered already (a redelivery), or dropped
    const hook = this.store.get(p.webhook_id);
    if (!hook) return this.store.abandon(p.delivery_id, "the webhook was deleted");
    const now = this.clock();
    if (now - row.created_at > MAX_DELIVERY_AGE_MS) {
      return this.store.abandon(
        p.delivery_id,
        `given up after ${MAX_DELIVERY_AGE_MS / 3600_000} h: ${row.last_error ?? "no answer"}`,
      );
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
      // One deadline for the headers and the answer's first bytes (../lib/body.ts).
      const signal = AbortSignal.timeout(DELIVERY_TIMEOUT_MS);
      const res = await this.fetcher(hook.url, { method: "POST", headers, body, redirect: "manual", signal });
      http = res.status;
      if (res.status < 200 || res.status >= 300)
        error = `HTTP ${res.status}: ${(await textPrefix(res, 200, signal).catch(() => ({ text: "" }))).text.slice(0, 200)}`;
      else await res.body?.cancel();
    } catch (err) {
      const e = err as { name?: string; message?: string };
      error =
        e?.name === "TimeoutError"
          ? `no answer within ${DELIVERY_TIMEOUT_MS / 1000} s`
          : String(e?.message ?? err).slice(0, 300);
    }
    // Dropped meanwhile (the fleet was deleted): its log says so already.
    if (epoch !== this.epoch) return;
    this.store.recordAttempt(p.delivery_id, this.clock(), { status: error ? "pending" : "delivered", http, error });
    if (error) throw new Error(`webhook ${hook.id}: ${error}`);
  }
}
