/**
 * Reboot groups as operators see and change them: configuration changes, applied live, and the
 * views of groups with their holders and parked hosts.
 */
import type { FleetSettings } from "../model/fleet";
import { entryNamed, TRIED } from "./named";
import { fail, type Failure } from "../objects/kit/result";
import { groupBlockedBy, hostBlockedBy } from "./blocked";
import { budgetClosure } from "./disruption";
import { audit } from "./effects";
import type { CoordinatorParts } from "./parts";
import { holdView, verdictView } from "./gate-rules";
import { liveEntries, type QueueEntry } from "./queue";
import { configure, newGroup, type GroupChange, type GroupState } from "./semaphore";
import type { FleetConfig } from "./store";
import { groupView, type GroupView } from "./views";

/** A group the fleet creates on first use, when it has a default slot count. */
export function implicitGroup(config: FleetConfig, now: number): GroupState | null {
  return config.default_group_slots ? newGroup(config.default_group_slots, now) : null;
}

export async function putGroup(
  c: CoordinatorParts,
  settings: FleetSettings,
  name: string,
  change: GroupChange,
  actor: string,
): Promise<GroupView> {
  const config = c.store.syncSettings(settings);
  const now = c.clock();
  c.store.saveGroup(name, configure(c.store.group(name) ?? null, change, now));
  c.gates.prime();
  const audited = audit(
    c,
    [{ actor, action: "reboot_group.put", target: `fleet:${settings.fleet_id}`, details: { group: name, ...change } }],
    { wait: true },
  );
  // More slots, unpaused or new windows: parked hosts get what is free now, not after D1.
  await Promise.all([audited, c.parked.drain(name)]);
  return viewOf(c, config, name, c.store.group(name)!, now);
}

export function getGroup(
  c: CoordinatorParts,
  settings: FleetSettings,
  name: string,
): { ok: true; group: GroupView } | Failure {
  const config = c.store.syncSettings(settings);
  const group = c.store.group(name);
  if (!group) return fail("not_found", `reboot group '${name}' is not configured`);
  return { ok: true, group: viewOf(c, config, name, group, c.clock()) };
}

export function listGroups(c: CoordinatorParts, settings: FleetSettings): GroupView[] {
  const config = c.store.syncSettings(settings);
  const now = c.clock();
  return c.store.groups().map(([name, group]) => viewOf(c, config, name, group, now));
}

export function viewOf(
  c: CoordinatorParts,
  config: FleetConfig,
  name: string,
  group: GroupState,
  now: number,
): GroupView {
  const queue = { entries: c.store.queue(name), connected: (id: string) => c.parked.connected(id) };
  const fleetGates = c.gateStore.fleet();
  const gates = {
    source: group.gates ? ("group" as const) : fleetGates?.config ? ("fleet" as const) : ("none" as const),
    own: group.gates ?? null,
    hold: holdView(group.hold, now),
    verdicts: c.gates.verdicts(group, now).map(verdictView),
  };
  const hostname = (serverId: string | null, id: string) =>
    (serverId && (c.store.servers.get(serverId)?.hostname ?? c.disruption.members().get(serverId)?.hostname)) || id;
  const input = {
    g: group,
    now,
    holds: c.gates.effective(group).holds,
    verdicts: c.gates.verdicts(group, now),
    hostname,
  };
  const held = groupBlockedBy(input);
  return groupView(
    name,
    group,
    queue,
    now,
    config.lock_ttl_s * 1000,
    (serverId) => {
      const s = c.store.servers.get(serverId);
      return { id: serverId, hostname: s ? s.hostname : null };
    },
    gates,
    {
      group: held,
      host: (e, ahead) => hostBlockedBy(input, held, budgetClosure(c, e.server_id)?.block ?? null, ahead),
    },
  );
}

/** An operator takes a parked host out of the group's queue; its waiting request is refused. */
export async function dequeueHost(
  c: CoordinatorParts,
  settings: FleetSettings,
  name: string,
  id: string,
  actor: string,
): Promise<{ ok: true; removed: QueueEntry; group: GroupView } | Failure> {
  const config = c.store.syncSettings(settings);
  if (!c.store.group(name)) return fail("not_found", `reboot group '${name}' is not configured`);
  const now = c.clock();
  const queued = entryNamed(
    liveEntries(c.store.queue(name), now),
    id,
    settings.fleet_id,
    (s) => c.store.servers.get(s)?.hostname,
  );
  if (!queued) return fail("not_queued", `'${id}' is not waiting in the queue of reboot group '${name}' (${TRIED})`);
  const removed = c.parked.dequeue(name, queued.id)!;
  await audit(
    c,
    [
      {
        actor,
        action: "reboot_group.dequeue",
        target: `fleet:${settings.fleet_id}`,
        details: {
          group: name,
          id: removed.id,
          server_id: removed.server_id,
          waiting_since: new Date(removed.since).toISOString(),
        },
      },
    ],
    { wait: true },
  );
  return { ok: true, removed, group: viewOf(c, config, name, c.store.group(name)!, now) };
}
