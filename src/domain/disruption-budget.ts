/** The shape of a fleet's disruption budget, as D1 stores it (decided by src/fleetlock/budget.ts). */

/** A count of servers, or a share of them ("25%", rounded up as Kubernetes' maxUnavailable is). */
export type Amount = number | `${number}%`;

export interface DisruptionBudget {
  /** For the whole fleet; null: no fleet-wide limit. */
  max_unavailable: Amount | null;
  /** Per label key: at most this many servers sharing one value of it (`{"zone": 1}`). */
  per_label: Record<string, Amount>;
}
