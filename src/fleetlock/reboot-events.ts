/**
 * The reboot events a fleet's webhooks can ask for (src/webhooks/events.ts), built where the
 * grant or release happens, in its turn. Rollout slots (`rollout:…` holders) are not reboots and
 * send none.
 */
import { emit, type Outgoing } from "./effects";
import { isStuck, type GroupState } from "./semaphore";
import type { CoordinatorStore } from "./store";

type Who = { id: string; server_id: string | null };

const hostOf = (store: CoordinatorStore, h: Who) =>
  h.server_id ? (store.servers.get(h.server_id)?.hostname ?? h.id) : h.id;
const subject = (h: Who) => (h.server_id ? `server:${h.server_id}` : `fleetlock:${h.id}`);

export function rebootGranted(o: Outgoing, group: string, h: Who, now: number, extra: Record<string, unknown> = {}) {
  // Nobody subscribed: no event, and no read of the server's hostname for its summary.
  if (h.id.startsWith("rollout:") || !o.webhooks.wants("reboot.granted")) return;
  const host = hostOf(o.store, h);
  emit(
    o,
    o.store.config?.fleet_id,
    "reboot.granted",
    subject(h),
    `${host} may reboot now (group ${group})`,
    { group, id: h.id, server_id: h.server_id, hostname: host, ...extra },
    now,
  );
}

/** Why a slot was freed: the host's steady state, a new boot seen, an operator, nobody claiming it, the server removed. */
export type ReleaseReason =
  "steady_state" | "rebooted" | "force_release" | "unclaimed" | "server_removed" | "healthy_report";

export function rebootReleased(o: Outgoing, group: string, h: Who, reason: ReleaseReason, now: number) {
  if (h.id.startsWith("rollout:") || !o.webhooks.wants("reboot.released")) return;
  const host = hostOf(o.store, h);
  const why: Record<ReleaseReason, string> = {
    steady_state: "is back",
    rebooted: "came back from its reboot",
    force_release: "was released by an operator",
    unclaimed: "did not claim its slot in time",
    server_removed: "was removed",
    healthy_report: "reported healthy after its reboot",
  };
  emit(
    o,
    o.store.config?.fleet_id,
    "reboot.released",
    subject(h),
    `${host} ${why[reason]}; its slot in group ${group} is free`,
    {
      group,
      id: h.id,
      server_id: h.server_id,
      hostname: host,
      reason,
    },
    now,
  );
}

function rebootStuck(o: Outgoing, group: string, h: Who & { granted_at: number }, lockTtlS: number, now: number) {
  if (h.id.startsWith("rollout:")) return;
  const host = hostOf(o.store, h);
  emit(
    o,
    o.store.config?.fleet_id,
    "reboot.stuck",
    subject(h),
    `${host} has held its slot in group ${group} for over ${lockTtlS} s`,
    {
      group,
      id: h.id,
      server_id: h.server_id,
      hostname: host,
      granted_at: new Date(h.granted_at).toISOString(),
      lock_ttl_s: lockTtlS,
    },
    now,
  );
}

/** Holders that became stuck (held longer than the fleet's lock_ttl_s) are reported once each. */
export function reportStuck(o: Outgoing, name: string, g: GroupState, now: number): GroupState {
  const ttl = o.store.config?.lock_ttl_s;
  if (!ttl) return g;
  const late = g.holders.filter(
    (h) => !h.stuck_reported && isStuck(h, now, ttl * 1000) && !h.id.startsWith("rollout:"),
  );
  if (late.length === 0) return g;
  const next = { ...g, holders: g.holders.map((h) => (late.includes(h) ? { ...h, stuck_reported: true } : h)) };
  o.store.saveGroup(name, next);
  for (const h of late) rebootStuck(o, name, h, ttl, now);
  return next;
}

/** When the next holder of the group becomes stuck, or null. */
export function stuckWake(store: CoordinatorStore, g: GroupState): number | null {
  const ttl = store.config?.lock_ttl_s;
  if (!ttl) return null;
  let at = Infinity;
  for (const h of g.holders)
    if (!h.stuck_reported && !h.id.startsWith("rollout:")) at = Math.min(at, h.granted_at + ttl * 1000 + 1);
  return at === Infinity ? null : at;
}
