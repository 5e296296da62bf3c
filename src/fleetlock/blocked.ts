/**
 * Why a reboot group grants nothing, and why each of its parked hosts waits, in the one shape
 * every waiter publishes (src/model/blocked-by.ts): a pause (an operator's, or the group's own
 * after a host did not report healthy), a hold, a closed gate, a closed window, its slots, the
 * fleet's disruption budget, the hosts ahead in the queue. Pure over what the coordinator holds.
 */
import { iso } from "../lib/time";
import type { BlockedBy } from "../model/blocked-by";
import type { GateVerdict, Hold } from "./gates";
import type { GroupState } from "./semaphore";
import { withinWindows } from "../model/windows";

const MINUTE = 60_000;
const WEEK_MINUTES = 7 * 24 * 60;

/** When the group's next window opens (windows open on whole minutes), or null: none within a week. */
function nextWindowOpen(g: GroupState, now: number): number | null {
  if (g.windows.length === 0) return null;
  const start = (Math.floor(now / MINUTE) + 1) * MINUTE;
  for (let i = 0; i <= WEEK_MINUTES; i++) if (withinWindows(g.windows, start + i * MINUTE)) return start + i * MINUTE;
  return null;
}

export interface GroupBlockInput {
  g: GroupState;
  now: number;
  /** The fleet's hold and the group's own. */
  holds: (Hold | null | undefined)[];
  verdicts: GateVerdict[];
  hostname: (serverId: string | null, id: string) => string;
}

/** What holds the whole group (nothing about one host): pause, holds, a closed gate, a closed window. */
export function groupBlockedBy(i: GroupBlockInput): BlockedBy[] {
  const { g, now } = i;
  const out: BlockedBy[] = [];
  if (g.paused) {
    if (g.paused_reason) {
      const late = g.holders.filter((h) => h.unhealthy_at !== undefined);
      const since = late.length ? Math.min(...late.map((h) => h.unhealthy_at!)) : g.updated_at;
      out.push({
        kind: "auto_paused",
        message: `paused by itself: ${g.paused_reason}`,
        since: iso(since),
        servers: late.slice(0, 10).map((h) => i.hostname(h.server_id, h.id)),
        detail: g.paused_reason,
      });
    } else {
      out.push({ kind: "paused", message: "paused by an operator", since: iso(g.updated_at) });
    }
  }
  for (const h of i.holds) {
    if (!h || (h.until !== null && h.until <= now)) continue;
    out.push({
      kind: "hold",
      message: `held by ${h.by}: ${h.reason}${h.until !== null ? ` (until ${iso(h.until)})` : ""}`,
      by: h.by,
      detail: h.reason,
      since: iso(h.at),
      ...(h.until !== null ? { until: iso(h.until) } : {}),
    });
  }
  const gate = i.verdicts.find((v) => !v.open && v.gate !== "hold");
  if (gate) {
    const since = g.gate?.gate === gate.gate ? g.gate.since : now;
    out.push({
      kind: "gate",
      message: `the ${gate.gate} gate is closed: ${gate.reason}`,
      since: iso(since),
      detail: gate.reason,
    });
  }
  if (!withinWindows(g.windows, now)) {
    const until = nextWindowOpen(g, now);
    out.push({
      kind: "window",
      message: until === null ? "no maintenance window is open" : `no maintenance window is open until ${iso(until)}`,
      ...(until !== null ? { until: iso(until) } : {}),
    });
  }
  return out;
}

/**
 * Why one parked host waits: what holds its group, then its slots if all are taken, the budget if
 * it refuses this host, then the hosts ahead of it.
 */
export function hostBlockedBy(
  i: GroupBlockInput,
  group: BlockedBy[],
  budget: BlockedBy | null,
  ahead: { server_id: string | null; id: string }[],
): BlockedBy[] {
  const out = [...group];
  if (i.g.holders.length >= i.g.slots) {
    const names = i.g.holders.map((h) => i.hostname(h.server_id, h.id));
    out.push({
      kind: "slots",
      message: `all ${i.g.slots} slot(s) are held by ${names.join(", ")}`,
      servers: names.slice(0, 10),
      value: i.g.holders.length,
      threshold: i.g.slots,
    });
  }
  if (budget) out.push(budget);
  if (ahead.length) {
    const names = ahead.map((e) => i.hostname(e.server_id, e.id));
    out.push({
      kind: "queue",
      message: `${ahead.length} host(s) are ahead in the queue: ${names.slice(0, 10).join(", ")}`,
      servers: names.slice(0, 10),
      value: ahead.length,
    });
  }
  return out;
}
