/**
 * A fleet spec's reboot groups (docs/fleets-as-code.md), as the coordinator applies them: every group the spec
 * declares, configured as declared, and the groups it prunes removed — all in one synchronous
 * turn, so hosts never see half of a spec. The spec's D1 batch recorded them as an `apply_groups`
 * fleet task (src/fleets/tasks.ts), which delivers them here until it gets an answer: a spec
 * revision applies once, and an older one arriving late changes nothing.
 */
import type { CoordinatorParts } from "./parts";
import { configure, type GroupChange, type GroupState } from "./semaphore";
import type { FleetSettings } from "../model/fleet";

/** What a spec's apply asks of the coordinator. */
export interface GroupsSpec {
  /** The fleet intent revision the spec committed at. */
  rev: number;
  /** Each declared group's configuration, every field given (a spec leaves `paused` to operators). */
  groups: Record<string, GroupChange>;
  /** Groups the spec prunes. */
  remove: string[];
}

export interface GroupsSpecOutcome {
  applied: boolean;
  changed: string[];
  removed: string[];
  /** Pruned groups that still had holders or parked hosts: kept with 0 slots, so they drain. */
  closed: string[];
}

/** The group without its timestamp, to tell whether a configuration changes anything. */
const settled = (g: GroupState) => JSON.stringify({ ...g, updated_at: 0 });

export async function applyGroupSpec(
  c: CoordinatorParts,
  settings: FleetSettings,
  spec: GroupsSpec,
): Promise<GroupsSpecOutcome> {
  c.store.syncSettings(settings);
  const out: GroupsSpecOutcome = { applied: false, changed: [], removed: [], closed: [] };
  if (spec.rev <= c.store.specRev) return out;
  const now = c.clock();
  for (const [name, change] of Object.entries(spec.groups)) {
    const current = c.store.group(name) ?? null;
    const next = configure(current, change, now);
    if (current && settled(current) === settled(next)) continue;
    c.store.saveGroup(name, next);
    out.changed.push(name);
  }
  for (const name of spec.remove) {
    const group = c.store.group(name);
    if (!group) continue;
    // A holder's release and a parked host's answer need their group: a busy group only closes.
    if (group.holders.length === 0 && c.store.queue(name).length === 0) {
      c.store.deleteGroup(name);
      out.removed.push(name);
    } else if (group.slots !== 0) {
      c.store.saveGroup(name, { ...group, slots: 0, updated_at: now });
      out.closed.push(name);
    }
  }
  c.store.specRev = spec.rev;
  out.applied = true;
  // More slots or new windows: parked hosts get what is free now.
  await Promise.all(out.changed.map((name) => c.parked.drain(name)));
  return out;
}
