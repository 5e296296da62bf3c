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
 *
 * A caller that dies between the hold and the write (kill -9) leaves a hold that no report would
 * end, since nothing changed on the server. So a hold starts with an end: the write must reach the
 * server's ledger by `deadline` (the ledger refuses it later), and at the hold's end the ledger is
 * asked. A desired generation past the one the fix saw means the write (or another one) happened:
 * the hold stays until the server reports it realized. Otherwise nothing was written, and none can
 * be any more: the unit frees.
 */
import { auditEvent } from "../db/audit";
import type { BlockedBy } from "../model/blocked-by";
import type { FleetSettings } from "../model/fleet";
import { budgetClosure } from "./disruption";
import type { CoordinatorParts } from "./parts";

/** `deadline`: the time (ms) by which the fix's write must reach the ledger, when a hold was taken for it. */
export type FixAllowance =
  { ok: true; deadline?: number } | { ok: false; kind: string; value: string; blocked_by: BlockedBy[] };

/** A server a fix would re-issue, with the desired generation the caller saw. */
export interface FixTarget {
  server_id: string;
  generation: number;
}

/** The hold a fix takes on its server: one per server, so a repeated fix takes nothing twice. */
const fixHolder = (serverId: string) => `fix:${serverId}`;

const FIX_ACTOR = "check.fix";

/** How long a fix's hold waits for its write before its server's ledger is asked. */
const FIX_WRITE_TTL_MS = 2 * 60_000;
/** The write must reach the ledger this long before the hold's end (clock skew), so the answer then is final. */
const FIX_WRITE_MARGIN_MS = 30_000;

/** The timer of a fix's hold, on the coordinator's alarm (./timers.ts). */
export const FIX_HOLD_TIMER = "fixhold";
const timerOf = (serverId: string) => `${FIX_HOLD_TIMER}:${serverId}`;

/**
 * Per server id, in the order given: allowed (its hold taken), or refused with the servers that
 * hold the budget. Without a budget every server is allowed and nothing is held.
 */
export function allowFixes(
  c: CoordinatorParts,
  settings: FleetSettings,
  targets: readonly FixTarget[],
  actor: string,
): Record<string, FixAllowance> {
  c.store.syncSettings(settings);
  const out: Record<string, FixAllowance> = {};
  if (!settings.disruption_budget) {
    for (const t of targets) out[t.server_id] = { ok: true };
    return out;
  }
  const now = c.clock();
  const until = c.scheduler.now() + FIX_WRITE_TTL_MS;
  const deadline = until - FIX_WRITE_MARGIN_MS;
  for (const { server_id: id, generation } of targets) {
    const closure = budgetClosure(c, id);
    if (closure) {
      out[id] = { ok: false, kind: closure.kind, value: closure.value, blocked_by: [closure.block] };
      continue;
    }
    const holder = fixHolder(id);
    const held = c.disruption.holds().get(holder);
    if (held) {
      // Its write is known: the realized report ends it, whenever this write lands.
      if (held.until == null) {
        out[id] = { ok: true };
        continue;
      }
      // Still waiting for a write: this one gets the time a new hold would (the generation seen first stays).
      c.disruption.replaceHold({ ...held, until });
    } else {
      c.disruption.putHold({ holder, server_id: id, rollout_id: FIX_ACTOR, since: now, until, generation });
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
    c.scheduler.schedule(timerOf(id), until, { until });
    out[id] = { ok: true, deadline };
  }
  return out;
}

/**
 * A fix's hold reached its end (the timer): the server's ledger is asked whether the desired
 * generation moved past the one the fix saw. The answer counts only if the hold is still the one
 * asked about. Written: kept until the realized report (or freed now if that came already);
 * not written: freed, since the ledger refuses the write past its deadline.
 */
export async function settleFixHold(c: CoordinatorParts, serverId: string, until: number) {
  const holder = fixHolder(serverId);
  const before = c.disruption.holds().get(holder);
  if (!before || before.until !== until) return;
  const desired = await c.askDesired(serverId);
  const h = c.disruption.holds().get(holder);
  if (!h || h.until !== until) return;
  const written = desired !== null && desired.generation > (h.generation ?? Infinity);
  if (written && !desired.realized) {
    c.disruption.replaceHold({ ...h, until: null });
    return;
  }
  releaseFix(c, serverId, desired === null ? "server gone" : written ? "realized" : "not written");
}

/** Ends a fix's hold (its server reported realized, or its write failed); true when one was held. */
export function releaseFix(c: CoordinatorParts, serverId: string, why: string): boolean {
  const h = c.disruption.dropHold(fixHolder(serverId));
  if (!h) return false;
  c.scheduler.cancel(timerOf(serverId));
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
