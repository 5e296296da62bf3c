/**
 * What the coordinator changes elsewhere: audit rows in D1 and console notices. They leave through
 * the durable outbox, committed in the same turn as the change they record, so no row is lost
 * when D1 is down. Webhook deliveries do not: they go to outsiders, on their own queue
 * (src/webhooks/dispatch.ts), so no receiver delays what this outbox carries.
 */
import { auditEvent, auditInsertManyOnce, auditInsertOnce, type AuditEntry, type AuditEvent } from "../db/audit";
import { feedEffect, type NoticeInput } from "../notices/notices";
import type { Db } from "../db/client";
import type { Env } from "../env";
import type { Effect, Outbox } from "../objects/kit/outbox";
import type { Scheduler } from "../objects/kit/scheduler";
import { lane, rolloutOf } from "../objects/stubs";
import type { DeliveryPayload, WebhookDispatcher } from "../webhooks/dispatch";
import { fleetEvent, type FleetEvent } from "../webhooks/events";
import { healthWatchStatement, type HealthWatchPayload } from "./health-watch";
import type { CoordinatorStore } from "./store";

/** How long a host grant's or release's audit row may wait to share a D1 batch with others. */
const HOST_AUDIT_DEFER_MS = 1_000;

export type CoordinatorEffectKind = "audit" | "webhook" | "feed" | "budget_wake" | "health_watch";
export type CoordinatorOutbox = Outbox<CoordinatorEffectKind>;

/** What the effects are delivered with. */
export interface CoordinatorEffectWiring {
  db: () => Db;
  env: () => Env;
  webhooks: WebhookDispatcher;
}

export function coordinatorEffects(w: CoordinatorEffectWiring): Record<CoordinatorEffectKind, Effect> {
  return {
    // A busy fleet's grants and releases: about one row a request, delivered many to an insert.
    audit: {
      target: "d1",
      statements: (e: AuditEvent) => [auditInsertOnce(w.db(), e)],
      many: (es: AuditEvent[]) => auditInsertManyOnce(w.db(), es),
    },
    // Only `webhook` effects stored by earlier code, which sent deliveries through this outbox:
    // taking one over is a storage write on the webhooks' own queue, never a request to the receiver.
    webhook: { target: "call", deliver: async (p: DeliveryPayload) => w.webhooks.adopt(p) },
    // The console's live notice (src/notices/notices.ts).
    feed: feedEffect(w.env),
    // A rollout waiting for the disruption budget: budget freed, it asks again (./disruption.ts).
    budget_wake: {
      target: "call",
      lane: (p: { rollout_id: string }) => lane.rollout(p.rollout_id),
      deliver: async (p: { rollout_id: string }) => {
        await rolloutOf(w.env(), p.rollout_id).budgetFreed();
      },
    },
    // Whether the fleet wants its ledgers' drift-only health events (./health-watch.ts).
    health_watch: { target: "d1", statements: (p: HealthWatchPayload) => [healthWatchStatement(w.db(), p)] },
  };
}

/**
 * The parts that send (./parts.ts has them all): the fleet (its config), the outbox and its alarm,
 * and the webhooks. A narrower view, so the queue (./parked.ts), which the parts hold, sends too.
 */
export interface Outgoing {
  store: CoordinatorStore;
  outbox: CoordinatorOutbox;
  scheduler: Scheduler;
  webhooks: WebhookDispatcher;
}

/**
 * Something open console pages show changed (a grant, a release, the queue, a gate, a group):
 * one pending notice (keyed), riding with this second's audit batch or its alarm.
 */
export function changed(o: Outgoing, group?: string) {
  const fleet = o.store.config?.fleet_id;
  if (!fleet) return;
  // A grant or release calls this several times in its turn (the group saved, the audit row):
  // one stored notice a turn is enough (pages re-fetch what they show), stored again only to name
  // a group it did not name yet.
  let ids = noticedThisTurn.get(o.outbox);
  if (ids && (!group || ids.has(group))) return;
  if (!ids) {
    ids = new Set<string>();
    noticedThisTurn.set(o.outbox, ids);
    queueMicrotask(() => noticedThisTurn.delete(o.outbox));
  }
  if (group) ids.add(group);
  const notice: NoticeInput = { fleet, kind: "reboot", ids: [...ids], from: "coordinator" };
  o.outbox.enqueue("feed", notice, { key: "feed", deferMs: HOST_AUDIT_DEFER_MS });
  void o.scheduler.arm().catch(() => undefined);
}

/** The groups named by the notice each outbox stored in the current turn (see `changed`). */
const noticedThisTurn = new WeakMap<CoordinatorOutbox, Set<string>>();

/**
 * Hosts' grants and releases (`wait: false`) are audited within HOST_AUDIT_DEFER_MS, many rows
 * to one D1 batch, instead of one batch each; an operator's change is delivered before its answer.
 */
export async function audit(o: Outgoing, entries: AuditEntry[], opts: { wait: boolean }) {
  for (const e of entries) o.outbox.enqueue("audit", auditEvent(e), opts.wait ? {} : { deferMs: HOST_AUDIT_DEFER_MS });
  // Every audited change (gates, holds, settings, webhooks) is one pages may show.
  if (entries.length) changed(o);
  if (entries.length) await o.scheduler.arm();
  if (opts.wait) await o.outbox.flush();
}

/**
 * Emits a fleet event (src/webhooks/events.ts) to the fleet's webhooks in the current turn, so its
 * deliveries commit with the change.
 */
export function emit(
  o: Outgoing,
  fleetId: string | undefined,
  type: FleetEvent["type"],
  subject: string,
  summary: string,
  data: Record<string, unknown>,
  time?: number,
) {
  if (fleetId) o.webhooks.emit(fleetEvent(fleetId, type, subject, summary, data, time));
}

/** A host's (or an allowed unknown id's) grant or release, as its audit row. */
export function hostAudit(
  fleetId: string | undefined,
  action: string,
  id: string,
  serverId: string | null,
  details: Record<string, unknown>,
): AuditEntry {
  return {
    actor: serverId ? `server:${serverId}` : `fleetlock:${id}`,
    action,
    target: `fleet:${fleetId ?? "?"}`,
    details: { id, server_id: serverId, ...details },
  };
}
