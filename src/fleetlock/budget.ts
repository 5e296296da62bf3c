/**
 * The fleet's disruption budget (docs/reboot-safety.md#one-disruption-budget), as pure functions
 * over plain data: how many servers of the fleet, and of each value of a label, may be disrupted at
 * once, and whether one more server may be. A server is disrupted while it holds a reboot slot
 * (FleetLock or a rollout's), is an applying rollout target, or is unavailable (stale or failed);
 * a server counts once whatever disrupts it, so a rollout target on a server that already holds a
 * reboot slot takes nothing more.
 *
 * The count lives in the fleet's RebootCoordinator (./disruption.ts applies this): it is already
 * the one place every reboot slot is granted in one synchronous turn, so FleetLock grants,
 * rollout targets and the servers it learns are unavailable are counted where no two requests
 * can interleave.
 */
import type { Amount, DisruptionBudget } from "../domain/disruption-budget";
import type { BlockedBy } from "../model/blocked-by";

export type { Amount, DisruptionBudget };

/** What the coordinator knows of a server of the fleet (pushed by its ledger). */
export interface Member {
  hostname: string;
  labels: Record<string, string>;
}

/** What disrupts a server: a reboot slot, a rollout target applying, being stale or failed. */
export type Disruption = "reboot" | "rollout" | "unavailable";

/** How many servers out of `total` an amount allows; a share is rounded up, never below 0. */
export function allowance(amount: Amount, total: number): number {
  if (typeof amount === "number") return amount;
  const pct = Number(amount.slice(0, -1));
  return Math.max(0, Math.ceil((pct * total) / 100));
}

export interface BudgetInput {
  budget: DisruptionBudget | null;
  /** Every server of the fleet the coordinator knows, by id. */
  members: ReadonlyMap<string, Member>;
  /** The servers disrupted now, by id, with what disrupts each. */
  disrupted: ReadonlyMap<string, readonly Disruption[]>;
}

export type BudgetVerdict =
  | { ok: true }
  | {
      ok: false;
      /** Which limit is spent: "fleet" or the label key. */
      limit: string;
      /** The label's value for a per-label limit. */
      value?: string;
      allowed: number;
      /** Ids of the servers that hold it. */
      holders: string[];
      message: string;
    };

const hostnameOf = (i: BudgetInput, id: string) => i.members.get(id)?.hostname ?? id;

/**
 * Whether `serverId` may be disrupted now. A server already disrupted adds nothing and may always
 * be disrupted again (its reboot slot and its rollout write are one disruption). A server whose
 * labels lack a key is not limited by that key's budget.
 */
export function mayDisrupt(i: BudgetInput, serverId: string | null): BudgetVerdict {
  const b = i.budget;
  if (!b) return { ok: true };
  if (serverId !== null && i.disrupted.has(serverId)) return { ok: true };
  if (b.max_unavailable !== null) {
    const allowed = allowance(b.max_unavailable, i.members.size);
    if (i.disrupted.size + 1 > allowed) {
      const holders = [...i.disrupted.keys()];
      return {
        ok: false,
        limit: "fleet",
        allowed,
        holders,
        message: `the fleet's disruption budget (${allowed} of ${i.members.size}) is held by ${holders.map((h) => hostnameOf(i, h)).join(", ") || "nobody"}`,
      };
    }
  }
  const labels = serverId === null ? undefined : i.members.get(serverId)?.labels;
  if (!labels) return { ok: true };
  for (const [key, amount] of Object.entries(b.per_label)) {
    const value = labels[key];
    if (value === undefined) continue;
    let total = 0;
    for (const m of i.members.values()) if (m.labels[key] === value) total++;
    const holders = [...i.disrupted.keys()].filter((id) => i.members.get(id)?.labels[key] === value);
    const allowed = allowance(amount, total);
    if (holders.length + 1 > allowed) {
      return {
        ok: false,
        limit: key,
        value,
        allowed,
        holders,
        message: `the disruption budget of ${key}=${value} (${allowed} of ${total}) is held by ${holders.map((h) => hostnameOf(i, h)).join(", ")}`,
      };
    }
  }
  return { ok: true };
}

/** A refusal as every waiter publishes it. */
export function budgetBlock(i: BudgetInput, v: Exclude<BudgetVerdict, { ok: true }>): BlockedBy {
  return {
    kind: "budget",
    message: v.message,
    servers: v.holders.slice(0, 10).map((id) => hostnameOf(i, id)),
    threshold: v.allowed,
    value: v.holders.length,
    detail: v.limit === "fleet" ? "fleet" : `${v.limit}=${v.value}`,
  };
}
