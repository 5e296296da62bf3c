/**
 * The fleet history's decisions (pure): when the cron rolls up, what a fleet's figures are, whether
 * they changed since its last row, what the retention keeps. The D1 side is store.ts, the cron's
 * run service.ts.
 */

/** One row per fleet per period at most. */
export const PERIOD_MS = 5 * 60_000;
/** Rows older than this go, but the newest of them stays: it is the state at the window's start. */
export const RETENTION_MS = 30 * 86_400_000;
/** Versions kept per agent, the most common first; the rest are counted together as `other`. */
const MAX_VERSIONS = 8;
/** Agents kept per fleet, by name; a row stays small whatever a fleet runs. */
const MAX_AGENTS = 64;

export interface AgentVersions {
  /** reported version → servers reporting it */
  versions: Record<string, number>;
  /** servers that should run the agent and have not reported it yet */
  none: number;
  /** servers on the versions past MAX_VERSIONS */
  other: number;
}

export interface Figures {
  /** servers by status, and `total` (removed servers excluded) */
  servers: Record<string, number>;
  versions: Record<string, AgentVersions>;
  /** reboot grants to the fleet's hosts since the previous rollup */
  reboots: number;
  /** rollouts started since the previous rollup */
  rollouts: number;
}

export const periodOf = (now: number) => now - (now % PERIOD_MS);

const DAY_MS = 86_400_000;

/** Whether the cron's tick at `now` rolls up: a period no rollup wrote for yet (`rolled`: the last one that did). */
export const rollupDue = (now: number, rolled: number | null) => rolled === null || periodOf(now) > rolled;

/** The cutoff below which rows go (all but the newest row below it, per fleet). */
export const pruneBefore = (now: number) => periodOf(now) - RETENTION_MS;

/**
 * Whether the rollup at `now` prunes: with the rows it writes (the history grows only then), and
 * once a day whatever it writes, so a fleet gone quiet still loses its rows past the retention. A
 * pruning that finds nothing to delete writes nothing.
 */
export const pruneDue = (now: number, writing: boolean) => writing || periodOf(now) % DAY_MS === 0;

/** One agent's instance counts by reported version (null: not reported), bounded. */
export function agentVersions(rows: { version: string | null; n: number }[]): AgentVersions {
  const out: AgentVersions = { versions: {}, none: 0, other: 0 };
  const reported = rows.filter((r) => r.version !== null) as { version: string; n: number }[];
  for (const r of rows) if (r.version === null) out.none += r.n;
  reported.sort((a, b) => b.n - a.n || (a.version < b.version ? -1 : a.version > b.version ? 1 : 0));
  // Only a ninth version is folded: eight shown and `other` of one would say less than the ninth's name.
  const keep = reported.length > MAX_VERSIONS ? MAX_VERSIONS - 1 : reported.length;
  reported.forEach((r, i) => {
    if (i < keep) out.versions[r.version] = r.n;
    else out.other += r.n;
  });
  return out;
}

/** The fleet's versions from (agent, version, count) rows: agents by name, MAX_AGENTS of them. */
export function fleetVersions(rows: { agent: string; version: string | null; n: number }[]) {
  const byAgent = new Map<string, { version: string | null; n: number }[]>();
  for (const r of rows) {
    const list = byAgent.get(r.agent) ?? [];
    list.push({ version: r.version, n: r.n });
    byAgent.set(r.agent, list);
  }
  const agents = [...byAgent.keys()].sort().slice(0, MAX_AGENTS);
  return Object.fromEntries(agents.map((a) => [a, agentVersions(byAgent.get(a)!)]));
}

/** JSON with keys sorted, so equal figures compare equal whatever order D1 gave them in. */
function canonical(value: unknown): string {
  if (value === null || typeof value !== "object") return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  const o = value as Record<string, unknown>;
  return `{${Object.keys(o)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${canonical(o[k])}`)
    .join(",")}}`;
}

/**
 * Whether a fleet's figures make a row: the first ever, a servers or versions figure that moved, or
 * a reboot or rollout counted. A period like the one before writes nothing.
 */
export function worthARow(last: Pick<Figures, "servers" | "versions"> | undefined, next: Figures): boolean {
  if (!last) return true;
  if (next.reboots > 0 || next.rollouts > 0) return true;
  return canonical(last.servers) !== canonical(next.servers) || canonical(last.versions) !== canonical(next.versions);
}
