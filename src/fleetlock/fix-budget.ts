/**
 * Drift fixes and the fleet's disruption budget (docs/reboot-safety.md#one-disruption-budget). A fix
 * that re-issues a server's config restarts its running agents: it disrupts the server like an
 * applying rollout target, so it holds a unit of the budget from before its write until the server
 * reports every agent realized. The coordinator answers for a whole page of fixes in one synchronous
 * turn and takes each allowed server's hold in it, so two fix calls (or a fix and a FleetLock host
 * or a rollout target) never both take the last unit.
 *
 * A fix refused for the budget is not queued: the caller is told who holds the budget and fixes
 * again later; nothing here waits for anyone.
 */
import { auditEvent } from "../db/audit";
import type { BlockedBy } from "../model/blocked-by";
import type { FleetSettings } from "../model/fleet";
import { budgetClosure } from "./disruption";
import type { CoordinatorParts } from "./parts";

export type FixAllowance = { ok: true } | { ok: false; kind: string; value: string; blocked_by: BlockedBy[] };

/** The hold a fix takes on its server: one per server, so a repeated fix takes nothing twice. */
const fixHolder = (serverId: string) => `fix:${serverId}`;

const FIX_ACTOR = "check.fix";

/**
 * Per server id, in the order given: allowed (its hold taken), or refused with the servers that
 * hold the budget. Without a budget every server is allowed and nothing is held.
 */
export function allowFixes(
  c: CoordinatorParts,
  settings: FleetSettings,
  serverIds: readonly string[],
  actor: string,
): Record<string, FixAllowance> {
  c.store.syncSettings(settings);
  const out: Record<string, FixAllowance> = {};
  if (!settings.disruption_budget) {
    for (const id of serverIds) out[id] = { ok: true };
    return out;
  }
  const now = c.clock();
  for (const id of serverIds) {
    const closure = budgetClosure(c, id);
    if (closure) {
      out[id] = { ok: false, kind: closure.kind, value: closure.value, blocked_by: [closure.block] };
      continue;
    }
    out[id] = { ok: true };
    const holder = fixHolder(id);
    if (c.disruption.holds().has(holder)) continue;
    c.disruption.putHold({ holder, server_id: id, rollout_id: FIX_ACTOR, since: now });
    c.outbox.enqueue(
      "audit",
      auditEvent({
        actor,
        action: "disruption.take",
        target: `fleet:${settings.fleet_id}`,
        details: { id: holder, server_id: id },
      }),
      { deferMs: 1_000 },
    );
  }
  return out;
}

/** Ends a fix's hold (its server reported realized, or its write failed); true when one was held. */
export function releaseFix(c: CoordinatorParts, serverId: string, why: string): boolean {
  const h = c.disruption.dropHold(fixHolder(serverId));
  if (!h) return false;
  c.outbox.enqueue(
    "audit",
    auditEvent({
      actor: FIX_ACTOR,
      action: "disruption.release",
      target: `fleet:${c.store.config?.fleet_id ?? "?"}`,
      details: { id: h.holder, server_id: serverId, why },
    }),
    { deferMs: 1_000 },
  );
  return true;
}
