/**
 * What the coordinator changes elsewhere: audit rows in D1 and console notices. They leave through
 * the durable outbox, committed in the same turn as the change they record, so no row is lost
 * when D1 is down. Webhook deliveries do not: they go to outsiders, on their own queue
 * (src/webhooks/dispatch.ts), so no receiver delays what this outbox carries.
 */
import { auditEvent, auditInsertOnce, type AuditEntry, type AuditEvent } from "../db/audit";
import { feedEffect, type NoticeInput } from "../notices/notices";
import type { Db } from "../db/client";
import type { Env } from "../env";
import { Outbox } from "../objects/kit/outbox";
import type { Scheduler } from "../objects/kit/scheduler";
import { rolloutOf } from "../objects/stubs";
import type { DeliveryPayload } from "../webhooks/dispatch";
import { fleetEvent, type FleetEvent } from "../webhooks/events";

/** How long a host grant's or release's audit row may wait to share a D1 batch with others. */
const HOST_AUDIT_DEFER_MS = 1_000;

export class CoordinatorEffects {
  readonly outbox: Outbox<"audit" | "webhook" | "feed" | "budget_wake">;
  /** The fleet this object coordinates (its config), for its console notices; set by ./assemble.ts. */
  fleetId: () => string | undefined = () => undefined;
  /**
   * Hands a webhook delivery to the webhooks' own queue (src/webhooks/dispatch.ts); set by
   * ./assemble.ts. Only for `webhook` effects stored by earlier code, which sent deliveries
   * through this outbox: taking one over is a storage write, never a request to the receiver.
   */
  adoptWebhook: (p: DeliveryPayload) => void = () => {
    throw new Error("no webhook dispatcher");
  };
  /**
   * Fleet events (reboot granted, gate closed, …) go to the fleet's webhooks from here; set by
   * ./assemble.ts. Called in the turn of the change, so its deliveries commit with it.
   */
  onEvent: (e: FleetEvent) => void = () => {};

  constructor(
    storage: DurableObjectStorage,
    private readonly scheduler: Scheduler,
    db: () => Db,
    env: () => Env,
  ) {
    this.outbox = new Outbox(
      storage,
      scheduler,
      {
        audit: { target: "d1", statements: (e: AuditEvent) => [auditInsertOnce(db(), e)] },
        webhook: { target: "call", deliver: async (p: DeliveryPayload) => this.adoptWebhook(p) },
        feed: feedEffect(env),
        // A rollout waiting for the disruption budget: budget freed, it asks again (./disruption.ts).
        budget_wake: {
          target: "call",
          deliver: async (p: { rollout_id: string }) => {
            await rolloutOf(env(), p.rollout_id).budgetFreed();
          },
        },
      },
      db,
    );
  }

  /**
   * Something open console pages show changed (a grant, a release, the queue, a gate, a group):
   * one pending notice (keyed), riding with this second's audit batch or its alarm.
   */
  changed(group?: string) {
    const fleet = this.fleetId();
    if (!fleet) return;
    const notice: NoticeInput = { fleet, kind: "reboot", ids: group ? [group] : [], from: "coordinator" };
    this.outbox.enqueue("feed", notice, { key: "feed", deferMs: HOST_AUDIT_DEFER_MS });
    void this.scheduler.arm().catch(() => undefined);
  }

  /**
   * Hosts' grants and releases (`wait: false`) are audited within HOST_AUDIT_DEFER_MS, many rows
   * to one D1 batch, instead of one batch each; an operator's change is delivered before its answer.
   */
  async audit(entries: AuditEntry[], opts: { wait: boolean }) {
    for (const e of entries)
      this.outbox.enqueue("audit", auditEvent(e), opts.wait ? {} : { deferMs: HOST_AUDIT_DEFER_MS });
    // Every audited change (gates, holds, settings, webhooks) is one pages may show.
    if (entries.length) this.changed();
    if (entries.length) await this.scheduler.arm();
    if (opts.wait) await this.outbox.flush();
  }
}

/** Emits a fleet event (src/webhooks/events.ts) in the current turn. */
export function emit(
  effects: CoordinatorEffects,
  fleetId: string | undefined,
  type: FleetEvent["type"],
  subject: string,
  summary: string,
  data: Record<string, unknown>,
  time?: number,
) {
  if (fleetId) effects.onEvent(fleetEvent(fleetId, type, subject, summary, data, time));
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
