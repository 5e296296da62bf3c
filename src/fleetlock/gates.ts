/**
 * Health gates (docs/reboot-safety.md), as pure functions over plain data: conditions that must hold before a
 * reboot group grants a new slot. They never take a granted slot back; they decide new grants,
 * parked hosts' included. A closed gate answers hosts with a FleetLock `{kind, value}` naming it.
 *
 * The inputs a gate reads are the coordinator's own (holds, servers rebooted and not yet healthy)
 * or copies with a bounded age (fleet health and running rollouts from the D1 index, an external
 * check's answer), refreshed off the host path by ./gate-keeper.ts. An input older than its bound
 * is unknown, and an unknown input closes its gate (the external check may be told to fail open).
 */
import type { FleetLockKind } from "../domain/enums";

/** A gate configuration: a group's own, or the fleet's default for groups that have none. */
export interface GateConfig {
  /** Hold grants while failed + stale servers of the fleet exceed a count or a share. */
  fleet_health?: { max_unhealthy?: number | null; max_unhealthy_percent?: number | null } | null;
  /** Hold grants while a rollout runs (or rolls back) in the fleet. */
  rollouts?: boolean;
  /** Hold grants while more servers than this rebooted and have not yet reported healthy. */
  max_rebooted_unhealthy?: number | null;
  /** An HTTPS URL answering 2xx means open; checked with a timeout, its answer cached. */
  external?: ExternalCheck | null;
}

interface ExternalCheck {
  url: string;
  timeout_s: number;
  cache_s: number;
  /** When the check cannot be reached (timeout, network error): open instead of closed. */
  fail_open: boolean;
}

/** An operator's hold on a group or on the whole fleet. */
export interface Hold {
  reason: string;
  /** When it lifts by itself; null: until an operator lifts it. */
  until: number | null;
  by: string;
  at: number;
}

/** Inputs with the time they were read (ms). */
export interface GateInputs {
  /**
   * `changed_at`: a server of the fleet told the coordinator its health class changed (failed,
   * stale, or back) after this copy was read; the copy is then unknown until read again.
   */
  health: { failed: number; stale: number; total: number; at: number; changed_at?: number } | null;
  rollouts: { running: number; at: number } | null;
  /** Per URL: whether the last check answered 2xx, and what it said otherwise. */
  external: Record<string, { ok: boolean; reachable: boolean; detail: string; at: number }>;
  /** Servers that rebooted and have not yet reported healthy (the coordinator's own count). */
  rebootedUnhealthy: number;
}

export const GATE_NAMES = ["hold", "fleet_health", "rollouts", "rebooted_unhealthy", "external"] as const;
export type GateName = (typeof GATE_NAMES)[number];

/** The FleetLock kind each gate answers hosts with (409). */
const GATE_KIND = {
  hold: "operator_hold",
  fleet_health: "fleet_unhealthy",
  rollouts: "rollout_running",
  rebooted_unhealthy: "reboots_unhealthy",
  external: "external_check_failed",
} as const satisfies Record<GateName, FleetLockKind>;

export interface GateVerdict {
  gate: GateName;
  open: boolean;
  kind: FleetLockKind;
  /** Why it is closed, or what it saw when open. */
  reason: string;
  /** Closed because its input is being read: a host may wait for the read (READ_WAIT_S). */
  reading?: boolean;
}

/**
 * How old an input read from the D1 index may be before it counts as unknown: past it, the gate
 * waits for a fresh read rather than answer from the old copy. Changes of a server's health
 * class are pushed by its ledger (src/fleetlock/ledger-side.ts) and make the copy unknown at
 * once; the age bound covers what no owner pushes (docs/reboot-safety.md).
 */
const INDEX_INPUT_MAX_AGE_MS = 60_000;
/** How old a copy may be before a pre-reboot asks for a new read (while still answering from it). */
export const INDEX_REFRESH_MS = 45_000;
/**
 * How long a host may wait (parked in the Worker, as in a queue) for an input being read, even in a
 * group that does not queue: a read takes one D1 query, so the host is answered from fresh facts.
 */
export const READ_WAIT_S = 10;

/** A server's health class as the fleet_health gate counts it; a change of class is pushed. */
export const healthClass = (status: string) => (status === "failed" || status === "stale" ? status : "ok");

/** An external check's answer counts for its cache_s; past twice that it is unknown. */
const externalMaxAgeMs = (x: ExternalCheck) => 2 * x.cache_s * 1000;

/** Whether the group's effective configuration has any gate that reads the D1 index. */
export const needsIndex = (cfg: GateConfig | null) => Boolean(cfg && (cfg.fleet_health || cfg.rollouts));

/** Every gate that applies, open or closed, in the order hosts are told about them. */
export function evaluate(
  cfg: GateConfig | null,
  holds: (Hold | null | undefined)[],
  inputs: GateInputs,
  now: number,
): GateVerdict[] {
  const out: GateVerdict[] = [];
  const verdict = (gate: GateName, open: boolean, reason: string) =>
    out.push({ gate, open, kind: GATE_KIND[gate], reason });
  for (const h of holds) {
    if (!h || (h.until !== null && h.until <= now)) continue;
    const until = h.until === null ? "" : ` until ${new Date(h.until).toISOString()}`;
    verdict("hold", false, `held by ${h.by}${until}: ${h.reason}`);
  }
  if (!cfg) return out;
  const fresh = (at: number | undefined) => at !== undefined && now - at <= INDEX_INPUT_MAX_AGE_MS;
  if (cfg.fleet_health) {
    const h = inputs.health;
    if (!h || !fresh(h.at) || h.changed_at !== undefined) {
      verdict(
        "fleet_health",
        false,
        h?.changed_at !== undefined
          ? "a server's health changed: fleet health is being read"
          : "fleet health is not known yet (being read)",
      );
      out[out.length - 1].reading = true;
    } else {
      const bad = h.failed + h.stale;
      const pct = h.total ? (100 * bad) / h.total : 0;
      const { max_unhealthy: n, max_unhealthy_percent: p } = cfg.fleet_health;
      const over = (n != null && bad > n) || (p != null && pct > p);
      const limits = [n != null ? `${n} server(s)` : null, p != null ? `${p} %` : null].filter(Boolean).join(" or ");
      verdict(
        "fleet_health",
        !over,
        `${bad} of ${h.total} server(s) failed or stale (${h.failed} failed, ${h.stale} stale; ${pct.toFixed(1)} %)${over ? `, over ${limits}` : ""}`,
      );
    }
  }
  if (cfg.rollouts) {
    const r = inputs.rollouts;
    if (!r || !fresh(r.at)) {
      verdict("rollouts", false, "running rollouts are not known yet (being read)");
      out[out.length - 1].reading = true;
    } else
      verdict(
        "rollouts",
        r.running === 0,
        r.running === 0 ? "no rollout is running" : `${r.running} rollout(s) running in the fleet`,
      );
  }
  if (cfg.max_rebooted_unhealthy != null) {
    const n = inputs.rebootedUnhealthy;
    const over = n > cfg.max_rebooted_unhealthy;
    verdict(
      "rebooted_unhealthy",
      !over,
      `${n} server(s) rebooted and not yet reported healthy${over ? ` (more than ${cfg.max_rebooted_unhealthy})` : ""}`,
    );
  }
  if (cfg.external) {
    const x = cfg.external;
    const seen = inputs.external[x.url];
    if (!seen || now - seen.at > externalMaxAgeMs(x)) {
      verdict("external", x.fail_open, `${x.url} not checked yet${x.fail_open ? " (fail-open)" : ""}`);
    } else if (!seen.reachable) {
      verdict(
        "external",
        x.fail_open,
        `${x.url} could not be checked: ${seen.detail}${x.fail_open ? " (fail-open)" : ""}`,
      );
    } else {
      verdict("external", seen.ok, `${x.url} answered ${seen.detail}`);
    }
  }
  return out;
}

/** The first closed gate, or null. */
export const firstClosed = (verdicts: GateVerdict[]) => verdicts.find((v) => !v.open) ?? null;

/** When a hold lifts by itself (the coordinator looks again then), or null. */
export function holdEnds(holds: (Hold | null | undefined)[], now: number): number | null {
  let at = Infinity;
  for (const h of holds) if (h && h.until !== null && h.until > now) at = Math.min(at, h.until);
  return at === Infinity ? null : at;
}
