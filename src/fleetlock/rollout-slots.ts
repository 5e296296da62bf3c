/**
 * Rollout slots (docs/rollouts.md). A rollout with reboot_slot takes a slot of the target server's group
 * under the holder id `rollout:<rollout id>:<server id>`: the same semaphore Zincati's FleetLock
 * takes, so the two together never exceed the group's slots.
 */
import { audit } from "./effects";
import type { CoordinatorParts } from "./parts";
import { releaseAndDrain } from "./grants";
import { implicitGroup } from "./groups";
import { acquire } from "./semaphore";
import type { FleetSettings } from "../model/fleet";

export interface RolloutSlotRequest {
  holder: string;
  server_id: string;
  group: string;
  rollout_id: string;
}

/**
 * Recursive like pre-reboot: a holder that already has its slot gets it again, so a redelivered
 * request grants nothing twice. Refusals carry the FleetLock kinds (full, paused, outside window,
 * unknown group).
 */
export async function acquireRolloutSlot(
  c: CoordinatorParts,
  settings: FleetSettings,
  req: RolloutSlotRequest,
): Promise<{ ok: true } | { ok: false; kind: string; value: string }> {
  const config = c.store.syncSettings(settings);
  if (c.store.heldIn(req.holder)) return { ok: true };
  const now = c.clock();
  const group = c.store.group(req.group) ?? implicitGroup(config, now);
  if (!group)
    return { ok: false, kind: "unknown_group", value: `reboot group '${req.group}' is not configured for this fleet` };
  // Hosts parked in the group's FIFO queue go first: a rollout never takes a slot past them.
  if (c.store.queue(req.group).length > 0) {
    return { ok: false, kind: "semaphore_full", value: "hosts are queued for this group's slots" };
  }
  const result = acquire(group, req.holder, req.server_id, now);
  if (!result.ok) return { ok: false, kind: result.kind, value: result.value };
  if (result.changed) {
    c.store.saveGroup(req.group, result.group);
    await audit(
      c,
      [
        {
          actor: `rollout:${req.rollout_id}`,
          action: "fleetlock.grant",
          target: `fleet:${settings.fleet_id}`,
          details: { id: req.holder, server_id: req.server_id, group: req.group },
        },
      ],
      { wait: false },
    );
  }
  return { ok: true };
}

/** Releases a rollout target's slot if held, and hands it to the first parked host; releasing nothing succeeds. */
export async function releaseRolloutSlot(
  c: CoordinatorParts,
  holder: string,
  rolloutId: string,
): Promise<{ ok: true; released: boolean }> {
  const groupName = c.store.heldIn(holder);
  if (!groupName) return { ok: true, released: false };
  const released = await releaseAndDrain(c, groupName, holder, c.clock(), (h) => ({
    actor: `rollout:${rolloutId}`,
    action: "fleetlock.release",
    target: `fleet:${c.store.config?.fleet_id ?? "?"}`,
    details: { id: holder, server_id: h.server_id, group: groupName },
  }));
  return { ok: true, released: released !== null };
}
