/**
 * The planner (docs/design.md §4 "Planner"): what a server should run, from its roles, the role
 * profiles and capabilities of its fleet, the fleet's agent channels, and what its current desired
 * config already gives it. Pure, so every rule is a table test.
 */

/** A catalog image's fields (src/domain/images.ts), repeated here to keep the planner import-free. */
interface PlannedCatalog {
  image_id: string;
  kind: "oci-archive" | "tarball" | "oci-ref";
  digest: string;
  size: number;
  source: { blob: string } | { ref: string };
}

/** An image as a channel holds it; `catalog` when it is a catalog image. */
export interface ChannelImage {
  image: string;
  version: string;
  catalog?: PlannedCatalog | null;
}

/** `"firewall"` holds when the capability is true; `"!object_storage"` when it is not true. */
type Condition = string;

export interface RoleAgent {
  name: string;
  when?: Condition;
}

export interface PlanInputs {
  roles: readonly string[];
  /** role → its agents; a role missing here has no profile (yet) and contributes nothing. */
  profiles: Readonly<Record<string, readonly RoleAgent[]>>;
  capabilities: Readonly<Record<string, boolean>>;
  /** agent → the image the fleet currently wants for it. */
  channels: Readonly<Record<string, ChannelImage>>;
  /** The agents of the server's current desired config (empty at registration). */
  current: readonly ({ name: string; image: string; version: string } & Partial<PlannedCatalog>)[];
}

/**
 * Everything the planner needs of one fleet, read as one snapshot with the intent revision it
 * corresponds to (./store.ts). Declared, not inferred from the query, because it travels: it is
 * the argument of the ledger's `applyPlan` RPC and the input of the ledger's plan step.
 */
export interface FleetPlanInputs {
  fleet: string;
  rev: number;
  capabilities: Record<string, boolean>;
  stale_after_s: number;
  profiles: Record<string, RoleAgent[]>;
  channels: Record<string, ChannelImage>;
}

interface PlannedAgent {
  name: string;
  image: string;
  version: string;
  /** The catalog image, as the channel or the current config holds it; null: a free-form image. */
  catalog: PlannedCatalog | null;
  /** Where the image came from: kept from the current config, or taken from the channel. */
  source: "current" | "channel";
}

export interface Plan {
  /** Sorted by name. */
  agents: PlannedAgent[];
  /** Roles of the server that have no profile in its fleet. */
  unknown_roles: string[];
  /** Agents a role asks for that the server does not run yet and that have no channel to install from. */
  unplannable: string[];
}

function conditionHolds(when: Condition | undefined, capabilities: Readonly<Record<string, boolean>>) {
  if (when === undefined) return true;
  return when.startsWith("!") ? capabilities[when.slice(1)] !== true : capabilities[when] === true;
}

export function plan(inputs: PlanInputs): Plan {
  const wanted = new Set<string>();
  const unknownRoles: string[] = [];
  for (const role of new Set(inputs.roles)) {
    const profile = inputs.profiles[role];
    if (!profile) {
      unknownRoles.push(role);
      continue;
    }
    // An agent in several roles runs if any of them wants it.
    for (const a of profile) if (conditionHolds(a.when, inputs.capabilities)) wanted.add(a.name);
  }
  const current = new Map(inputs.current.map((a) => [a.name, a]));
  const agents: PlannedAgent[] = [];
  const unplannable: string[] = [];
  for (const name of [...wanted].sort()) {
    // An agent the server already runs keeps its image: moving it is a rollout's job, not a
    // channel change's (docs/design.md §3).
    const have = current.get(name);
    if (have) {
      agents.push({ name, image: have.image, version: have.version, catalog: catalogOfEntry(have), source: "current" });
      continue;
    }
    const channel = inputs.channels[name];
    if (channel)
      agents.push({
        name,
        image: channel.image,
        version: channel.version,
        catalog: channel.catalog ?? null,
        source: "channel",
      });
    else unplannable.push(name);
  }
  return { agents, unknown_roles: unknownRoles.sort(), unplannable };
}

/** Whether applying `p` would change the agents of the current config (name, image, version). */
export function planDiffers(p: Plan, current: PlanInputs["current"]) {
  if (p.agents.length !== current.length) return true;
  const byName = new Map(current.map((a) => [a.name, a]));
  return p.agents.some((a) => {
    const c = byName.get(a.name);
    return (
      !c || c.image !== a.image || c.version !== a.version || (c.image_id ?? null) !== (a.catalog?.image_id ?? null)
    );
  });
}

function catalogOfEntry(a: Partial<PlannedCatalog>): PlannedCatalog | null {
  if (!a.image_id || !a.kind || !a.digest || a.size === undefined || !a.source) return null;
  return { image_id: a.image_id, kind: a.kind, digest: a.digest, size: a.size, source: a.source };
}
