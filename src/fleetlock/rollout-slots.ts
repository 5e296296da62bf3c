/**
 * Rollout slots (docs/rollouts.md). A rollout with reboot_slot takes a slot of the target server's group
 * under the holder id `rollout:<rollout id>:<server id>`: the same semaphore Zincati's FleetLock
 * takes, so the two together never exceed the group's slots.
 */
import { audit } from "./effects";
import type { CoordinatorParts } from "./parts";
import { releaseAndDrain } from "./grants";
import { implicitGroup } from "./groups";
import { acquire, type GroupState } from "./semaphore";
import { budgetClosure, holdForRollout, releaseRolloutHold } from "./disruption";
import type { BlockedBy } from "../model/blocked-by";
import type { FleetSettings } from "../model/fleet";

export interface RolloutSlotRequest {
  holder: string;
  server_id: string;
  group: string;
  rollout_id: string;
  /** False: the target takes no reboot slot, only its unit of the fleet's disruption budget. Absent: true. */
  reboot_slot?: boolean;
}

export type RolloutSlotAnswer = { ok: true } | { ok: false; kind: string; value: string; blocked_by?: BlockedBy[] };

/**
 * Recursive like pre-reboot: a holder that already has its slot (or hold) gets it again, so a
 * redelivered request grants nothing twice. Refusals carry the FleetLock kinds (full, paused,
 * outside window, unknown group, budget_exhausted). A refusal for the budget records the rollout
 * as waiting: it is woken through the outbox once the budget frees (./disruption.ts).
 */
export async function acquireRolloutSlot(
  c: CoordinatorParts,
  settings: FleetSettings,
  req: RolloutSlotRequest,
): Promise<RolloutSlotAnswer> {
  const config = c.store.syncSettings(settings);
  if (c.store.heldIn(req.holder) || c.disruption.holds().has(req.holder)) return { ok: true };
  const now = c.clock();
  let taken: { group: GroupState; changed: boolean } | null = null;
  if (req.reboot_slot !== false) {
    const group = c.store.group(req.group) ?? implicitGroup(config, now);
    if (!group)
      return {
        ok: false,
        kind: "unknown_group",
        value: `reboot group '${req.group}' is not configured for this fleet`,
      };
    // Hosts parked in the group's FIFO queue go first: a rollout never takes a slot past them.
    if (c.store.queue(req.group).length > 0) {
      return { ok: false, kind: "semaphore_full", value: "hosts are queued for this group's slots" };
    }
    const result = acquire(group, req.holder, req.server_id, now);
    if (!result.ok) return { ok: false, kind: result.kind, value: result.value };
    taken = result;
  }
  const budget = budgetClosure(c, req.server_id);
  if (budget) {
    c.disruption.addWait(req.rollout_id, req.server_id, now);
    return { ok: false, kind: budget.kind, value: budget.value, blocked_by: [budget.block] };
  }
  if (!taken) {
    holdForRollout(c, req, settings.fleet_id, now);
    await c.scheduler.arm();
    return { ok: true };
  }
  if (taken.changed) {
    c.store.saveGroup(req.group, taken.group);
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
  const held = releaseRolloutHold(c, holder, rolloutId);
  if (held) await c.scheduler.arm();
  const groupName = c.store.heldIn(holder);
  if (!groupName) return { ok: true, released: held };
  const released = await releaseAndDrain(c, groupName, holder, c.clock(), (h) => ({
    actor: `rollout:${rolloutId}`,
    action: "fleetlock.release",
    target: `fleet:${c.store.config?.fleet_id ?? "?"}`,
    details: { id: holder, server_id: h.server_id, group: groupName },
  }));
  return { ok: true, released: released !== null };
}
