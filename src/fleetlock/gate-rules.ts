/**
 * Health gates as operators set and see them (docs/reboot-safety.md): the fleet's default gates, holds on a
 * group or the whole fleet, the gates' state with their inputs; and the alarm's read of the inputs
 * (./gate-keeper.ts), after which parked hosts a gate held are granted if it opened.
 */
import { iso, isoOrNull } from "../lib/time";
import { fail, type Failure } from "../objects/kit/result";
import { audit } from "./effects";
import type { CoordinatorParts } from "./parts";
import { GATES_TIMER } from "./gate-keeper";
import type { FleetGates } from "./gate-store";
import { needsIndex, type GateConfig, type GateVerdict, type Hold } from "./gates";
import { liveEntries } from "./queue";
import type { FleetSettings } from "../model/fleet";

/** The alarm's read of the gates' inputs; then the queues are drained, and the next read planned. */
export async function readInputs(c: CoordinatorParts) {
  const fleetId = c.store.config?.fleet_id;
  if (!fleetId) return;
  await c.gates.refresh(fleetId);
  await afterRead(c);
}

/**
 * An external check's answer came in (fetched in the background, never by the alarm): parked hosts
 * its gate held are granted if it opened, and the next read planned as after the alarm's read.
 */
export async function externalAnswered(c: CoordinatorParts) {
  if (!c.store.config?.fleet_id) return;
  await afterRead(c, true);
}

/** `answer`: an answer, not the alarm's read: a read asked for meanwhile is kept, never put off. */
async function afterRead(c: CoordinatorParts, answer = false) {
  await c.parked.drainAll();
  const now = c.clock();
  // Read again only while someone waits behind a gate that reads an input.
  const waiting = c.store.groups().some(([name, g]) => {
    const cfg = c.gates.effective(g).config;
    return (needsIndex(cfg) || Boolean(cfg?.external)) && liveEntries(c.store.queue(name), now).length > 0;
  });
  const next = c.gates.nextRead(waiting);
  if (next !== null) c.scheduler.schedule(GATES_TIMER, next, null, { noLaterThan: answer });
  else if (!answer) c.scheduler.cancel(GATES_TIMER);
  await c.scheduler.arm();
}

export interface HoldView {
  reason: string;
  until: string | null;
  by: string;
  at: string;
}

export const holdView = (h: Hold | null | undefined, now: number): HoldView | null =>
  h && (h.until === null || h.until > now)
    ? { reason: h.reason, until: isoOrNull(h.until), by: h.by, at: iso(h.at) }
    : null;

export const verdictView = (v: GateVerdict) => ({ gate: v.gate, open: v.open, kind: v.kind, reason: v.reason });

/** The fleet's gates: the default configuration and hold, what each group's gates say, and the inputs as last read. */
export function fleetGatesView(c: CoordinatorParts, settings: FleetSettings) {
  c.store.syncSettings(settings);
  const now = c.clock();
  const fleet = c.gateStore.fleet();
  const inputs = c.gateStore.inputs();
  const age = (at: number | undefined) =>
    at === undefined ? null : Math.max(0, Math.round((c.scheduler.now() - at) / 1000));
  return {
    fleet: settings.fleet_id,
    default: fleet?.config ?? null,
    hold: holdView(fleet?.hold, now),
    inputs: {
      health: inputs.health
        ? {
            failed: inputs.health.failed,
            stale: inputs.health.stale,
            total: inputs.health.total,
            age_s: age(inputs.health.at),
          }
        : null,
      rollouts: inputs.rollouts ? { running: inputs.rollouts.running, age_s: age(inputs.rollouts.at) } : null,
      external: Object.entries(inputs.external).map(([url, x]) => ({
        url,
        ok: x.ok,
        reachable: x.reachable,
        detail: x.detail,
        age_s: age(x.at),
      })),
      rebooted_unhealthy: inputs.rebootedUnhealthy,
    },
    groups: c.store.groups().map(([name, g]) => ({
      name,
      source: g.gates ? ("group" as const) : fleet?.config ? ("fleet" as const) : ("none" as const),
      open: c.gates.verdicts(g, now).every((v) => v.open),
      gates: c.gates.verdicts(g, now).map(verdictView),
    })),
  };
}

/** PUT /v1/fleets/{fleet}/gates: the default gates of groups without their own. */
export async function putFleetGates(
  c: CoordinatorParts,
  settings: FleetSettings,
  config: GateConfig | null,
  actor: string,
) {
  c.store.syncSettings(settings);
  const before = c.gateStore.fleet();
  const next: FleetGates = { config, hold: before?.hold ?? null, updated_at: c.clock() };
  c.gateStore.saveFleet(next);
  await changed(c, settings, actor, "fleet.gates.put", { gates: config });
  return fleetGatesView(c, settings);
}

/**
 * Holds (or lifts the hold on) a group, or every group with `group` null. A hold never takes a
 * granted slot back; parked hosts stay parked behind it until it lifts (or their wait ends).
 */
export async function setHold(
  c: CoordinatorParts,
  settings: FleetSettings,
  group: string | null,
  hold: Omit<Hold, "at" | "by"> | null,
  actor: string,
): Promise<{ ok: true; hold: HoldView | null } | Failure> {
  c.store.syncSettings(settings);
  const now = c.clock();
  const value: Hold | null = hold ? { ...hold, by: actor, at: now } : null;
  if (group === null) {
    const before = c.gateStore.fleet();
    c.gateStore.saveFleet({ config: before?.config ?? null, hold: value, updated_at: now });
  } else {
    const g = c.store.group(group);
    if (!g) return fail("not_found", `reboot group '${group}' is not configured`);
    c.store.saveGroup(group, { ...g, hold: value, updated_at: now });
  }
  await changed(c, settings, actor, value ? "reboot.hold" : "reboot.unhold", {
    group: group ?? "*",
    ...(value ? { reason: value.reason, until: isoOrNull(value.until) } : {}),
  });
  return { ok: true, hold: holdView(value, now) };
}

/** After a gate setting changed: audited, queues drained (a gate may have opened), inputs read if new ones are needed. */
async function changed(
  c: CoordinatorParts,
  settings: FleetSettings,
  actor: string,
  action: string,
  details: Record<string, unknown>,
) {
  const audited = audit(c, [{ actor, action, target: `fleet:${settings.fleet_id}`, details }], { wait: true });
  c.gates.prime();
  await Promise.all([audited, c.parked.drainAll()]);
  await c.parked.rearm();
}
