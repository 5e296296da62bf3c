import { count, ne } from "drizzle-orm";
import { getDb } from "../db/client";
import { agentInstances, fleets, servers } from "../db/schema";
import type { Env } from "../env";
import { logLine, errorFields } from "../lib/log";
import { readUpgradeState } from "../upgrades/state";
import { NEWEST_VERSION, UPGRADE_STEPS } from "../upgrades/steps";
import { fleetSettings } from "../fleets/store";
import { coordinatorOf } from "../objects/stubs";
import { statusAt } from "../model/server/staleness";

/**
 * Prometheus gauges computed from durable state at scrape time: the D1 index (servers, instances,
 * the data version) and each fleet's coordinator (reboot groups). Every isolate computes the same
 * truth, so a scrape that lands on any isolate reads the fleet as it is; nothing here is a
 * per-isolate counter dressed up as a total (request counts and latencies belong to Workers
 * Analytics; D1 statement counts reach benchmarks through the local entry's route, src/local/index.ts).
 * A scrape every 15 s costs a handful of grouped D1 reads and one RPC per fleet, at most once per
 * CACHE_MS per isolate.
 */
const CACHE_MS = 15_000;

let cached: { data: Gathered; at: number } | null = null;

const escape = (v: string) => v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"');
const labels = (l: Record<string, string>) =>
  `{${Object.entries(l)
    .map(([k, v]) => `${k}="${escape(v)}"`)
    .join(",")}}`;

class Exposition {
  private lines: string[] = [];
  gauge(name: string, help: string, samples: { labels?: Record<string, string>; value: number }[]) {
    this.lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} gauge`);
    for (const s of samples) this.lines.push(`${name}${s.labels ? labels(s.labels) : ""} ${s.value}`);
  }
  text() {
    return this.lines.join("\n") + "\n";
  }
}

interface Gathered {
  byStatus: { fleet: string; status: string; n: number }[];
  byInstance: { fleet: string; agent: string; status: string; n: number }[];
  groups: {
    fleet: string;
    group: string;
    slots: number;
    holders: number;
    stuck: number;
    gates: { gate: string; open: boolean }[];
  }[];
  deliveries: { fleet: string; pending: number; failed: number }[];
  unreachable: string[];
  version: number;
}

/**
 * The exposition: every fleet's samples (null), or, for a token limited to some fleets, only
 * theirs, the instance counts summed over them alone, so no figure counts a fleet it may not see.
 */
export async function metricsText(env: Env, visible: readonly string[] | null = null, now = Date.now()) {
  if (!cached || now - cached.at >= CACHE_MS) cached = { data: await gather(env, now), at: now };
  return render(cached.data, visible);
}

async function gather(env: Env, now: number): Promise<Gathered> {
  const db = getDb(env.DB);
  const [byStatus, byInstance, fleetRows, upgrade] = await Promise.all([
    db
      .select({ fleet: servers.fleetId, status: statusAt(now), n: count() })
      .from(servers)
      .where(ne(servers.state, "removed"))
      .groupBy(servers.fleetId, statusAt(now)),
    db
      .select({ fleet: agentInstances.fleetId, agent: agentInstances.agent, status: agentInstances.status, n: count() })
      .from(agentInstances)
      .groupBy(agentInstances.fleetId, agentInstances.agent, agentInstances.status),
    db.select().from(fleets),
    readUpgradeState(db),
  ]);
  const groups: Gathered["groups"] = [];
  const deliveries: Gathered["deliveries"] = [];
  const unreachable: string[] = [];
  await Promise.all(
    fleetRows.map(async (row) => {
      try {
        const m = await coordinatorOf(env, row.id).metrics(fleetSettings(row));
        for (const g of m.groups) {
          groups.push({
            fleet: row.id,
            group: g.name,
            slots: g.slots,
            holders: g.holders.length,
            stuck: g.holders.filter((h) => h.stuck).length,
            gates: g.gates,
          });
        }
        deliveries.push({ fleet: row.id, ...m.webhooks });
      } catch (err) {
        unreachable.push(row.id);
        logLine("warn", "metrics: a fleet's coordinator did not answer", { fleet: row.id, ...errorFields(err) });
      }
    }),
  );
  groups.sort((a, b) => (a.fleet + "\0" + a.group < b.fleet + "\0" + b.group ? -1 : 1));
  deliveries.sort((a, b) => (a.fleet < b.fleet ? -1 : 1));
  return { byStatus, byInstance, groups, deliveries, unreachable, version: upgrade.version };
}

function render(all: Gathered, visible: readonly string[] | null): string {
  const seen = (r: { fleet: string }) => visible === null || visible.includes(r.fleet);
  const byStatus = all.byStatus.filter(seen);
  const groups = all.groups.filter(seen);
  const deliveries = all.deliveries.filter(seen);
  const instances = new Map<string, { agent: string; status: string; value: number }>();
  for (const r of all.byInstance.filter(seen)) {
    const key = `${r.agent}\0${r.status}`;
    const sum = instances.get(key) ?? { agent: r.agent, status: r.status, value: 0 };
    sum.value += r.n;
    instances.set(key, sum);
  }
  const out = new Exposition();
  out.gauge(
    "harbormaster_servers",
    "Servers by fleet and computed status (from the fleet-wide index; removed servers excluded).",
    byStatus.map((r) => ({ labels: { fleet: r.fleet, status: r.status }, value: r.n })),
  );
  out.gauge(
    "harbormaster_agent_instances",
    "Agent instances by agent and status (from the fleet-wide index).",
    [...instances.values()]
      .sort((a, b) => (a.agent + "\0" + a.status < b.agent + "\0" + b.status ? -1 : 1))
      .map((r) => ({ labels: { agent: r.agent, status: r.status }, value: r.value })),
  );
  out.gauge(
    "harbormaster_reboot_group_slots",
    "Slots of each reboot group.",
    groups.map((g) => ({ labels: { fleet: g.fleet, group: g.group }, value: g.slots })),
  );
  out.gauge(
    "harbormaster_reboot_group_holders",
    "Holders of each reboot group.",
    groups.map((g) => ({ labels: { fleet: g.fleet, group: g.group }, value: g.holders })),
  );
  out.gauge(
    "harbormaster_reboot_group_stuck_holders",
    "Holders that have held their slot longer than the fleet's lock_ttl_s.",
    groups.map((g) => ({ labels: { fleet: g.fleet, group: g.group }, value: g.stuck })),
  );
  out.gauge(
    "harbormaster_reboot_group_gate_closed",
    "1 while a health gate holds every new grant of the group, 0 while it is open (one sample per gate that applies).",
    groups.flatMap((g) =>
      g.gates.map((v) => ({ labels: { fleet: g.fleet, group: g.group, gate: v.gate }, value: v.open ? 0 : 1 })),
    ),
  );
  out.gauge(
    "harbormaster_webhook_deliveries",
    "Webhook deliveries still being retried (pending) and given up on (failed, as kept in the delivery log).",
    deliveries.flatMap((d) => [
      { labels: { fleet: d.fleet, status: "pending" }, value: d.pending },
      { labels: { fleet: d.fleet, status: "failed" }, value: d.failed },
    ]),
  );
  out.gauge("harbormaster_coordinators_unreachable", "Fleets whose coordinator did not answer this scrape.", [
    { value: all.unreachable.filter((fleet) => seen({ fleet })).length },
  ]);
  out.gauge("harbormaster_data_version", "The data version D1 is at.", [{ value: all.version }]);
  out.gauge("harbormaster_data_version_newest", "The newest data version this code knows.", [
    { value: NEWEST_VERSION },
  ]);
  out.gauge("harbormaster_upgrade_steps_pending", "Upgrade steps not yet applied.", [
    { value: UPGRADE_STEPS.filter((s) => s.version > all.version).length },
  ]);
  return out.text();
}

/** Tests: the next scrape computes afresh. */
export function forgetMetricsCache() {
  cached = null;
}
