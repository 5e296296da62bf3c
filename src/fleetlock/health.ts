/**
 * The release rule per group (docs/reboot-safety.md): `steady_state`, what every FleetLock server does (the
 * host's steady-state call frees its slot), or `healthy_report`: the steady-state call is answered
 * 200 as Zincati expects, but the slot stays taken until the server's ledger reports from the new
 * boot with every agent realized. Past the group's `health_timeout_s` without that, the server is
 * marked unhealthy after its reboot, its slot stays taken, and (unless `pause_on_unhealthy` is
 * false) the group pauses itself, so a bad OS update stops at the first server.
 *
 * Either way, a server that rebooted and has not yet reported healthy is remembered (gate-store's
 * `recovering`) for the `max_rebooted_unhealthy` gate, until a healthy report or its removal.
 */
import type { CoordinatorParts } from "./parts";
import { noteHealth } from "./disruption";
import { fixRealized } from "./fix-budget";
import { audit, emit, hostAudit } from "./effects";
import type { Recovering } from "./gate-store";
import { healthClass } from "./gates";
import { publishHealthWatch } from "./health-watch";
import { driftOnly, type ServerHealthEvent } from "./ledger-side";
import { DEFAULT_HEALTH_TIMEOUT_S, type GroupState, type Holder } from "./semaphore";

export const RELEASE_RULES = ["steady_state", "healthy_report"] as const;
export type ReleaseRule = (typeof RELEASE_RULES)[number];

const releaseOn = (g: GroupState): ReleaseRule => g.release_on ?? "steady_state";
const healthTimeoutMs = (g: GroupState) => (g.health_timeout_s ?? DEFAULT_HEALTH_TIMEOUT_S) * 1000;

/** Whether this holder's slot waits for a healthy report instead of its steady-state call. */
export const waitsForHealth = (g: GroupState, h: Holder) =>
  releaseOn(g) === "healthy_report" && h.server_id !== null && !h.id.startsWith("rollout:");

/** Remembers that a server rebooted (and, once seen, the boot it came back with). */
export function noteRebooted(
  c: CoordinatorParts,
  h: { server_id: string; id: string },
  group: string,
  now: number,
  bootId: string | null,
) {
  const was = c.gateStore.recovering().get(h.server_id);
  const next: Recovering = {
    server_id: h.server_id,
    id: h.id,
    group,
    since: was?.since ?? now,
    boot_id: bootId ?? was?.boot_id ?? null,
    realized_boot: was?.realized_boot ?? null,
    unhealthy_at: was?.unhealthy_at ?? null,
  };
  if (JSON.stringify(next) !== JSON.stringify(was)) c.gateStore.saveRecovering(next);
}

/**
 * A holder in a healthy_report group is back (its steady-state call, or its ledger saw the new
 * boot): the slot stays taken, and the health time-out starts.
 */
export function holdUntilHealthy(c: CoordinatorParts, name: string, h: Holder, now: number, bootId: string | null) {
  const g = c.store.group(name)!;
  if (h.rebooted_at === undefined) {
    c.store.saveGroup(name, {
      ...g,
      holders: g.holders.map((x) => (x.id === h.id ? { ...x, rebooted_at: now } : x)),
      updated_at: now,
    });
  }
  noteRebooted(c, { server_id: h.server_id!, id: h.id }, name, now, bootId);
}

/** The ledger's news of a server (./ledger-side.ts): a new boot, realized, failed or drifted. */
export async function serverHealth(c: CoordinatorParts, e: ServerHealthEvent) {
  const fleetId = c.store.config?.fleet_id;
  const now = c.clock();
  // Failed, stale or back: the fleet-health copy no longer holds; gates wait for a read, asked now.
  if (e.status && healthClass(e.status.from) !== healthClass(e.status.to)) {
    c.gates.healthChanged();
    await c.scheduler.arm();
  }
  // Stale or failed servers are disrupted: the budget counts them until they are back.
  noteHealth(c, e);
  const recoveringBefore = c.gateStore.recovering().size;
  const held = c.store
    .groups()
    .flatMap(([name, g]) => g.holders.filter((h) => h.server_id === e.server_id).map((h) => ({ name, g, h })));
  if (e.rebooted_from) {
    // Slots granted before this report belong to the boot that just ended.
    const before = held.filter(({ h }) => h.granted_at <= e.at);
    for (const { name, g, h } of before) if (waitsForHealth(g, h)) holdUntilHealthy(c, name, h, now, e.boot_id);
    const first = before[0];
    noteRebooted(
      c,
      { server_id: e.server_id, id: first?.h.id ?? c.store.servers.get(e.server_id)?.fleetlock_id ?? e.server_id },
      first?.name ?? "",
      now,
      e.boot_id,
    );
  }
  if (e.realized) {
    // A drift fix's re-issue is done once every agent runs as desired at its generation: its budget unit frees.
    if (fixRealized(c, e.server_id, e.generation)) await c.scheduler.arm();
    await realized(c, e.server_id, e.boot_id, now);
  }
  // Fewer (or more) servers rebooted and not yet healthy: a gate counting them may have changed.
  if (c.gateStore.recovering().size !== recoveringBefore) await c.parked.drainAll();
  await c.parked.rearm();
  // A ledger sent what no webhook wants (D1 still says unknown, or the last one asking went): say so.
  if (driftOnly(e) && publishHealthWatch(c, e.fleet_id)) {
    // Delivered now, not by the outbox's safety alarm: every drift until then is a call more.
    await c.scheduler.arm();
    await c.outbox.flush();
  }
  if (e.status && (e.status.to === "failed" || e.status.to === "drifted")) {
    emit(
      c,
      fleetId,
      e.status.to === "failed" ? "server.failed" : "server.drifted",
      `server:${e.server_id}`,
      `Server ${e.hostname} is ${e.status.to} (was ${e.status.from})`,
      { server_id: e.server_id, hostname: e.hostname, from: e.status.from, to: e.status.to },
      e.at,
    );
  }
}

/** A report from `bootId` with every agent realized: healthy, if that is the boot it rebooted into. */
async function realized(c: CoordinatorParts, serverId: string, bootId: string, now: number) {
  const r = c.gateStore.recovering().get(serverId);
  if (!r) return;
  if (r.boot_id === null) {
    // Back (steady-state) but its new boot not seen yet: this report may still be the old boot's.
    if (r.realized_boot !== bootId) c.gateStore.saveRecovering({ ...r, realized_boot: bootId });
    return;
  }
  if (r.boot_id !== bootId && r.realized_boot !== bootId) return;
  c.gateStore.dropRecovering(serverId);
  await releaseHealthy(c, serverId, now, r);
}

/** Frees the slots a server kept until it was healthy; its group stays paused if it paused itself. */
async function releaseHealthy(c: CoordinatorParts, serverId: string, now: number, r: Recovering) {
  const fleetId = c.store.config?.fleet_id;
  const freed: string[] = [];
  for (const [name, g] of c.store.groups()) {
    const mine = g.holders.filter(
      (h) => h.server_id === serverId && h.rebooted_at !== undefined && waitsForHealth(g, h),
    );
    if (mine.length === 0) continue;
    c.store.saveGroup(name, { ...g, holders: g.holders.filter((h) => !mine.includes(h)), updated_at: now });
    freed.push(name);
    for (const h of mine) {
      emit(
        c,
        fleetId,
        "reboot.released",
        `server:${serverId}`,
        `${h.id} reported healthy after its reboot; its slot in ${name} is free`,
        {
          group: name,
          id: h.id,
          server_id: serverId,
          reason: "healthy_report",
          boot_id: r.boot_id,
          rebooted_at: new Date(h.rebooted_at!).toISOString(),
        },
        now,
      );
    }
    await audit(
      c,
      mine.map((h) =>
        hostAudit(fleetId, "fleetlock.release_healthy", h.id, serverId, { group: name, boot_id: r.boot_id }),
      ),
      { wait: false },
    );
  }
  for (const name of freed) await c.parked.drain(name);
}

/**
 * Before a group grants anything: holders past their health time-out are marked unhealthy after
 * their reboot (reported once), and the group pauses itself unless told not to.
 */
export function expireHealth(c: CoordinatorParts, name: string, g: GroupState, now: number): GroupState {
  if (releaseOn(g) !== "healthy_report") return g;
  const late = g.holders.filter(
    (h) => h.rebooted_at !== undefined && h.unhealthy_at === undefined && h.rebooted_at + healthTimeoutMs(g) <= now,
  );
  if (late.length === 0) return g;
  const fleetId = c.store.config?.fleet_id;
  const pause = g.pause_on_unhealthy !== false;
  const names = late.map((h) => c.store.servers.get(h.server_id!)?.hostname ?? h.id);
  const reason = `${names.join(", ")} did not report healthy within ${healthTimeoutMs(g) / 1000} s of its reboot`;
  const next: GroupState = {
    ...g,
    holders: g.holders.map((h) => (late.includes(h) ? { ...h, unhealthy_at: now } : h)),
    ...(pause && !g.paused ? { paused: true, paused_reason: reason } : {}),
    updated_at: now,
  };
  c.store.saveGroup(name, next);
  for (const h of late) {
    const r = c.gateStore.recovering().get(h.server_id!);
    if (r) c.gateStore.saveRecovering({ ...r, unhealthy_at: now });
    const host = c.store.servers.get(h.server_id!)?.hostname ?? h.id;
    emit(
      c,
      fleetId,
      "reboot.unhealthy_after_reboot",
      `server:${h.server_id}`,
      `${host} rebooted but did not report healthy within ${healthTimeoutMs(g) / 1000} s; its slot in ${name} stays taken${pause ? ` and the group is paused` : ""}`,
      {
        group: name,
        id: h.id,
        server_id: h.server_id,
        hostname: host,
        rebooted_at: new Date(h.rebooted_at!).toISOString(),
        paused: pause,
        blocked_by: pause
          ? [
              {
                kind: "auto_paused",
                message: `paused by itself: ${reason}`,
                since: new Date(now).toISOString(),
                servers: names.slice(0, 10),
                detail: reason,
              },
            ]
          : [],
      },
      now,
    );
  }
  void audit(
    c,
    late.map((h) =>
      hostAudit(fleetId, "fleetlock.unhealthy_after_reboot", h.id, h.server_id, { group: name, paused: pause }),
    ),
    { wait: false },
  );
  return next;
}

/** When the group's next health time-out falls, or null. */
export function healthWake(g: GroupState): number | null {
  if (releaseOn(g) !== "healthy_report") return null;
  let at = Infinity;
  for (const h of g.holders)
    if (h.rebooted_at !== undefined && h.unhealthy_at === undefined)
      at = Math.min(at, h.rebooted_at + healthTimeoutMs(g));
  return at === Infinity ? null : at;
}
