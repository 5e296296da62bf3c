/**
 * A fleet's webhooks and their delivery log, kept in the storage of the object that sends them
 * (the fleet's coordinator): each webhook under `webhook:<id>` in KV, secret included (it never
 * leaves the object after creation: views drop it), and one SQL row per delivery.
 */
import { kitTable } from "../objects/kit/tables";
import type { WebhookFormat } from "../domain/enums";

export interface Webhook {
  id: string;
  /** Its name in the fleet spec (src/specs/); null for one added through the API (the spec names it by id). */
  name?: string | null;
  /** The environment variable the spec's `secret_ref` names (not the secret); null when none. */
  secret_env?: string | null;
  url: string;
  events: string[];
  format: WebhookFormat;
  description: string | null;
  /** The signing key; stored here so deliveries can be signed, never shown again. */
  secret: string;
  created_at: number;
  created_by: string;
}

type DeliveryStatus = "pending" | "delivered" | "failed";

export type DeliveryRow = {
  id: string;
  webhook_id: string;
  event_id: string;
  event_type: string;
  status: DeliveryStatus;
  attempts: number;
  created_at: number;
  last_attempt_at: number | null;
  delivered_at: number | null;
  last_status: number | null;
  last_error: string | null;
};

export type SendRow = { delivery_id: string; webhook_id: string; payload: string; attempts: number };

/** Finished deliveries kept per webhook for GET …/deliveries; older ones are dropped. */
const DELIVERIES_KEPT = 200;

const KEY = (id: string) => `webhook:${id}`;
/** Secrets a spec's apply staged before its D1 commit (src/webhooks/spec.ts); not a `webhook:` key. */
const STAGE = "webhook-stage:";
const SPEC_REV = "webhook-spec-rev";

interface SecretStage {
  at: number;
  secrets: Record<string, string>;
}

/** How long an event id delivered by another owner is remembered, so its redelivery is dropped. */
const EVENT_IDS_KEPT_MS = 7 * 24 * 3600_000;

export class WebhookStore {
  private hooks: Map<string, Webhook> | undefined;
  private readonly table;
  private readonly seen;
  private readonly sends;

  constructor(private readonly storage: DurableObjectStorage) {
    this.table = kitTable(
      storage,
      "webhook_deliveries",
      `CREATE TABLE IF NOT EXISTS webhook_deliveries (
      id TEXT PRIMARY KEY,
      webhook_id TEXT NOT NULL,
      event_id TEXT NOT NULL,
      event_type TEXT NOT NULL,
      status TEXT NOT NULL,
      attempts INTEGER NOT NULL DEFAULT 0,
      created_at INTEGER NOT NULL,
      last_attempt_at INTEGER,
      delivered_at INTEGER,
      last_status INTEGER,
      last_error TEXT
    );
    CREATE INDEX IF NOT EXISTS webhook_deliveries_by_hook ON webhook_deliveries (webhook_id, created_at);`,
    );
    this.seen = kitTable(
      storage,
      "webhook_events",
      `CREATE TABLE IF NOT EXISTS webhook_events (
      id TEXT PRIMARY KEY,
      at INTEGER NOT NULL
    );
    CREATE INDEX IF NOT EXISTS webhook_events_by_at ON webhook_events (at);`,
    );
    // The sends still owed, one row per pending delivery: the webhooks' own queue, apart from the
    // object's outbox, so a receiver that never answers holds up nothing but its own deliveries.
    this.sends = kitTable(
      storage,
      "webhook_sends",
      `CREATE TABLE IF NOT EXISTS webhook_sends (
      delivery_id TEXT PRIMARY KEY,
      webhook_id TEXT NOT NULL,
      payload TEXT NOT NULL,
      attempts INTEGER NOT NULL DEFAULT 0,
      next_at INTEGER NOT NULL
    );
    CREATE INDEX IF NOT EXISTS webhook_sends_by_next ON webhook_sends (next_at);`,
    );
  }

  /** A delivery to send, due at `at` (a delivery already queued keeps its place). */
  queueSend(deliveryId: string, webhookId: string, payload: unknown, at: number) {
    this.sends.ensure();
    this.storage.sql.exec(
      "INSERT INTO webhook_sends (delivery_id, webhook_id, payload, next_at) VALUES (?, ?, ?, ?) ON CONFLICT(delivery_id) DO NOTHING",
      deliveryId,
      webhookId,
      JSON.stringify(payload),
      at,
    );
  }

  /** Sends due at `now`, oldest first. */
  dueSends(now: number, limit: number): SendRow[] {
    if (!this.sends.exists()) return [];
    return this.storage.sql
      .exec<SendRow>(
        "SELECT delivery_id, webhook_id, payload, attempts FROM webhook_sends WHERE next_at <= ? ORDER BY next_at, rowid LIMIT ?",
        now,
        limit,
      )
      .toArray();
  }

  /** When the next send falls due after `now` (a retry, or a send under way whose lease runs out), or null. */
  nextSendAfter(now: number): number | null {
    if (!this.sends.exists()) return null;
    return this.storage.sql
      .exec<{ at: number | null }>("SELECT MIN(next_at) AS at FROM webhook_sends WHERE next_at > ?", now)
      .one().at;
  }

  /** Moves a send to `at`: its lease while under way (tried again then, should the object die), or its retry. */
  sendAt(deliveryId: string, at: number, attempts?: number) {
    if (!this.sends.exists()) return;
    if (attempts === undefined)
      this.storage.sql.exec("UPDATE webhook_sends SET next_at = ? WHERE delivery_id = ?", at, deliveryId);
    else
      this.storage.sql.exec(
        "UPDATE webhook_sends SET next_at = ?, attempts = ? WHERE delivery_id = ?",
        at,
        attempts,
        deliveryId,
      );
  }

  sent(deliveryId: string) {
    if (this.sends.exists()) this.storage.sql.exec("DELETE FROM webhook_sends WHERE delivery_id = ?", deliveryId);
  }

  /** Every send still owed is dropped, and its delivery recorded as failed with `why`; how many. */
  dropSends(why: string): number {
    if (!this.sends.exists()) return 0;
    const n = this.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM webhook_sends").one().n;
    if (this.table.exists()) {
      this.storage.sql.exec(
        "UPDATE webhook_deliveries SET status = 'failed', last_error = ? WHERE status = 'pending' AND id IN (SELECT delivery_id FROM webhook_sends)",
        why,
      );
    }
    this.storage.sql.exec("DELETE FROM webhook_sends");
    return n;
  }

  /**
   * Records an event id delivered by another owner's outbox (or the cron); false when it was seen
   * already, so a redelivery sends nothing twice. Ids older than EVENT_IDS_KEPT_MS are forgotten.
   */
  firstSeen(id: string, now: number): boolean {
    this.seen.ensure();
    const fresh =
      this.storage.sql.exec("INSERT INTO webhook_events (id, at) VALUES (?, ?) ON CONFLICT(id) DO NOTHING", id, now)
        .rowsWritten > 0;
    if (fresh) this.storage.sql.exec("DELETE FROM webhook_events WHERE at < ?", now - EVENT_IDS_KEPT_MS);
    return fresh;
  }

  private get map(): Map<string, Webhook> {
    if (!this.hooks) {
      this.hooks = new Map();
      for (const [, w] of this.storage.kv.list<Webhook>({ prefix: "webhook:" })) this.hooks.set(w.id, w);
    }
    return this.hooks;
  }

  all(): Webhook[] {
    return [...this.map.values()].sort((a, b) => a.created_at - b.created_at || (a.id < b.id ? -1 : 1));
  }

  get(id: string): Webhook | undefined {
    return this.map.get(id);
  }

  put(w: Webhook) {
    this.storage.kv.put(KEY(w.id), w);
    this.map.set(w.id, w);
  }

  delete(id: string) {
    this.storage.kv.delete(KEY(id));
    this.map.delete(id);
    if (this.table.exists())
      this.storage.sql.exec("DELETE FROM webhook_deliveries WHERE webhook_id = ? AND status != 'pending'", id);
  }

  addDelivery(row: Pick<DeliveryRow, "id" | "webhook_id" | "event_id" | "event_type" | "created_at">) {
    this.table.ensure();
    this.storage.sql.exec(
      "INSERT INTO webhook_deliveries (id, webhook_id, event_id, event_type, status, created_at) VALUES (?, ?, ?, ?, 'pending', ?)",
      row.id,
      row.webhook_id,
      row.event_id,
      row.event_type,
      row.created_at,
    );
    // Keep the log bounded: the oldest finished deliveries of this webhook go.
    this.storage.sql.exec(
      `DELETE FROM webhook_deliveries WHERE webhook_id = ? AND status != 'pending' AND id NOT IN (
         SELECT id FROM webhook_deliveries WHERE webhook_id = ? ORDER BY created_at DESC LIMIT ?)`,
      row.webhook_id,
      row.webhook_id,
      DELIVERIES_KEPT,
    );
  }

  delivery(id: string): DeliveryRow | null {
    if (!this.table.exists()) return null;
    return this.storage.sql.exec<DeliveryRow>("SELECT * FROM webhook_deliveries WHERE id = ?", id).toArray()[0] ?? null;
  }

  /** An attempt's outcome; `status` moves on only from pending. */
  recordAttempt(
    id: string,
    at: number,
    outcome: { status: DeliveryStatus; http: number | null; error: string | null },
  ) {
    if (!this.table.exists()) return;
    this.storage.sql.exec(
      `UPDATE webhook_deliveries SET attempts = attempts + 1, last_attempt_at = ?, last_status = ?, last_error = ?,
         status = ?, delivered_at = CASE WHEN ? = 'delivered' THEN ? ELSE delivered_at END
       WHERE id = ? AND status = 'pending'`,
      at,
      outcome.http,
      outcome.error,
      outcome.status,
      outcome.status,
      at,
      id,
    );
  }

  /** Gives up on a delivery without an attempt (its webhook was deleted, or it is too old). */
  abandon(id: string, why: string) {
    if (!this.table.exists()) return;
    this.storage.sql.exec(
      "UPDATE webhook_deliveries SET status = 'failed', last_error = ? WHERE id = ? AND status = 'pending'",
      why,
      id,
    );
  }

  deliveries(webhookId: string, limit: number): DeliveryRow[] {
    if (!this.table.exists()) return [];
    return this.storage.sql
      .exec<DeliveryRow>(
        "SELECT * FROM webhook_deliveries WHERE webhook_id = ? ORDER BY created_at DESC, id LIMIT ?",
        webhookId,
        limit,
      )
      .toArray();
  }

  /** Deliveries still being tried, and deliveries given up on (kept in the log), over every webhook. */
  counts(): { pending: number; failed: number } {
    if (!this.table.exists()) return { pending: 0, failed: 0 };
    const rows = this.storage.sql
      .exec<{ status: string; n: number }>("SELECT status, COUNT(*) AS n FROM webhook_deliveries GROUP BY status")
      .toArray();
    const n = (s: string) => rows.find((r) => r.status === s)?.n ?? 0;
    return { pending: n("pending"), failed: n("failed") };
  }

  stage(id: string, stage?: SecretStage): SecretStage | undefined {
    if (stage) this.storage.kv.put(STAGE + id, stage);
    return this.storage.kv.get<SecretStage>(STAGE + id);
  }

  stages(): [string, SecretStage][] {
    return [...this.storage.kv.list<SecretStage>({ prefix: STAGE })].map(([k, v]) => [k.slice(STAGE.length), v]);
  }

  dropStage(id: string) {
    this.storage.kv.delete(STAGE + id);
  }

  /** The intent revision of the last spec whose webhooks were applied. */
  get specRev(): number {
    return this.storage.kv.get<number>(SPEC_REV) ?? 0;
  }

  set specRev(rev: number) {
    this.storage.kv.put(SPEC_REV, rev);
  }

  forget() {
    this.hooks = undefined;
  }
}
