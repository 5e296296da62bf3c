/**
 * The fleet's disruption budget, applied in its coordinator (./budget.ts decides). Every reboot
 * slot (a host's or a rollout's), every applying rollout target (a hold taken before its write)
 * and every server its ledger reported stale or failed is counted here, and every grant, hold and
 * refusal is decided and stored in the same synchronous turn: two requests cannot both take the
 * last unit. What frees a unit (a release, a server back, a larger budget) is noticed once per turn
 * (BudgetWatch): parked hosts of every group are looked at again, and rollouts that wait for
 * budget are woken through the outbox; nothing polls.
 */
import { auditEvent } from "../db/audit";
import type { BlockedBy } from "../model/blocked-by";
import { budgetBlock, mayDisrupt, type BudgetInput, type Disruption, type DisruptionBudget } from "./budget";
import type { CoordinatorParts } from "./parts";
import type { StoredMember } from "./disruption-store";
import { healthClass } from "./gates";
import type { Closure } from "./queue";

const budgetOf = (c: CoordinatorParts): DisruptionBudget | null => c.store.config?.disruption_budget ?? null;

/** Servers disrupted now (and `extra`, granted in the decision under way), with what disrupts each. */
function disruptedNow(c: CoordinatorParts, extra: readonly string[] = []): Map<string, Disruption[]> {
  const out = new Map<string, Disruption[]>();
  const add = (id: string, why: Disruption) => {
    const list = out.get(id) ?? [];
    if (!list.includes(why)) list.push(why);
    out.set(id, list);
  };
  for (const [, g] of c.store.groups())
    for (const h of g.holders) if (h.server_id) add(h.server_id, h.id.startsWith("rollout:") ? "rollout" : "reboot");
  for (const h of c.disruption.holds().values()) add(h.server_id, "rollout");
  for (const id of c.disruption.down().keys()) add(id, "unavailable");
  for (const id of extra) add(id, "reboot");
  return out;
}

const budgetInput = (c: CoordinatorParts, extra: readonly string[] = []): BudgetInput => ({
  budget: budgetOf(c),
  members: c.disruption.members(),
  disrupted: disruptedNow(c, extra),
});

/** A refusal for the budget, as hosts are told it and waiters publish it. */
export type BudgetClosure = Closure & { block: BlockedBy };

/** Null when `serverId` may be disrupted now; else why not, naming the servers that hold the budget. */
export function budgetClosure(
  c: CoordinatorParts,
  serverId: string | null,
  extra: readonly string[] = [],
): BudgetClosure | null {
  if (!budgetOf(c)) return null;
  const input = budgetInput(c, extra);
  const v = mayDisrupt(input, serverId);
  if (v.ok) return null;
  return { kind: "budget_exhausted", value: v.message, block: budgetBlock(input, v) };
}

/** A ledger described its server (registration, a label change): kept for per-label budgets. */
export function serverMember(c: CoordinatorParts, serverId: string, m: StoredMember) {
  c.disruption.putMember(serverId, m);
}

/** What of a ledger's health event the budget reads (./ledger-side.ts `ServerHealthEvent`). */
interface HealthNews {
  server_id: string;
  at: number;
  realized: boolean;
  status: { from: string; to: string } | null;
}

/**
 * A server's health as its ledger told it: stale or failed servers are disrupted. One its ledger
 * said was down is back on any healthy status. One a drift fix's bound counted failed (its ledger
 * never said so) is back only on news every coordinator is sent, whoever listens: a realized
 * report, or a change of health class into healthy. A change within the healthy class (pending to
 * drifted) reaches the coordinator only while a webhook asks for `server.drifted`
 * (./ledger-side.ts), so it frees nothing: the budget must not depend on who listens.
 */
export function noteHealth(c: CoordinatorParts, e: HealthNews) {
  const cls = e.status ? healthClass(e.status.to) : null;
  if (cls !== null && cls !== "ok") return c.disruption.setDown(e.server_id, { status: cls, since: e.at });
  const down = c.disruption.down().get(e.server_id);
  if (!down) return;
  const back = down.by_fix
    ? e.realized || (e.status !== null && healthClass(e.status.from) !== "ok")
    : e.status !== null;
  if (back) c.disruption.setDown(e.server_id, null);
}

/** A rollout target's hold without a reboot slot, for the time it applies. */
export function holdForRollout(
  c: CoordinatorParts,
  req: { holder: string; server_id: string; rollout_id: string },
  fleetId: string,
  now: number,
) {
  if (c.disruption.holds().has(req.holder)) return;
  c.disruption.putHold({ holder: req.holder, server_id: req.server_id, rollout_id: req.rollout_id, since: now });
  c.outbox.enqueue(
    "audit",
    auditEvent({
      actor: `rollout:${req.rollout_id}`,
      action: "disruption.take",
      target: `fleet:${fleetId}`,
      details: { id: req.holder, server_id: req.server_id },
    }),
    { deferMs: 1_000 },
  );
}

/** Ends a rollout target's hold; true when one was held. */
export function releaseRolloutHold(c: CoordinatorParts, holder: string, rolloutId: string): boolean {
  const h = c.disruption.dropHold(holder);
  if (!h) return false;
  c.outbox.enqueue(
    "audit",
    auditEvent({
      actor: `rollout:${rolloutId}`,
      action: "disruption.release",
      target: `fleet:${c.store.config?.fleet_id ?? "?"}`,
      details: { id: holder, server_id: h.server_id },
    }),
    { deferMs: 1_000 },
  );
  return true;
}

/**
 * Notices, once per turn, that the budget may have freed: a server left the disrupted set, the
 * budget or a server's labels changed. Then every group's parked hosts are looked at again, and
 * each rollout waiting for budget whose server may now go is woken through the outbox. Unknown
 * after a wake (nothing remembered): the first change counts as freeing.
 */
export class BudgetWatch {
  private last: Set<string> | null = null;
  private pending = false;
  private forced = false;

  constructor(private readonly c: () => CoordinatorParts) {}

  /** Something the count reads changed in this turn; `force`: a change that may free without a release. */
  touch(force = false) {
    this.forced ||= force;
    if (this.pending) return;
    this.pending = true;
    queueMicrotask(() => {
      this.pending = false;
      this.look().catch((err) => console.error(JSON.stringify({ msg: "budget watch failed", error: String(err) })));
    });
  }

  private async look() {
    const c = this.c();
    // Without a budget nothing waits for one, so the fleet's disrupted servers (every holder of
    // every group) are not counted on each grant and release; unknown again, the first look once
    // a budget is set counts as freeing.
    if (!budgetOf(c)) {
      this.forced = false;
      this.last = null;
      return;
    }
    const now = new Set(disruptedNow(c).keys());
    const freed = this.forced || this.last === null || [...this.last].some((id) => !now.has(id));
    this.forced = false;
    this.last = now;
    if (!freed) return;
    await budgetFreed(c);
  }
}

/** The budget may have freed: parked hosts first (in the turn that freed it), then waiting rollouts. */
async function budgetFreed(c: CoordinatorParts) {
  const drained = c.parked.drainAll();
  let woken = 0;
  // A copy: the loop drops the waits it wakes.
  for (const w of Array.from(c.disruption.waits().values())) {
    if (!w.servers.some((s) => budgetClosure(c, s) === null)) continue;
    c.disruption.dropWait(w.rollout_id);
    c.outbox.enqueue("budget_wake", { rollout_id: w.rollout_id }, { key: `budget_wake:${w.rollout_id}` });
    woken++;
  }
  await drained;
  if (woken > 0) {
    await c.scheduler.arm();
    void c.outbox.flush().catch(() => undefined);
  }
}
