/**
 * What a spec would change in a fleet, item by item, and what its apply has to write: pure, over
 * the fleet's state (./store.ts) and the parsed spec. An apply writes exactly the items listed
 * here as add, change or remove; `unlisted` items (the fleet has them, the spec does not name
 * them, no prune) are left as they are.
 */
import type { GroupChange } from "../fleetlock/semaphore";
import { storedAgents } from "../intent/batch";
import type { RoleAgent } from "../planner/plan";
import { byKey, sameValue } from "./canonical";
import { groupConfig, type GroupConfig } from "./groups";
import type { DiffItem, DiffOp, FleetSpec, SpecSection, SpecSettings } from "./schemas";
import type { SpecChannelRollout } from "./rollout-defaults";
import type { FleetState } from "./store";
import { planServers, type ServersPlan } from "./spec-servers";
import { comparable, webhooksTask } from "./webhooks";
import { accessChanges, type AccessRowChange } from "./access";

export interface SpecPlan {
  items: DiffItem[];
  /** Settings the spec changes. */
  settings: Partial<SpecSettings>;
  /** The fleet's capabilities after the apply, when they change. */
  capabilities: Record<string, boolean> | null;
  channels: {
    write: {
      agent: string;
      input: { image: string; version: string };
      previous: { image: string; version: string } | null;
      /** The image or version changes (else only the default rollout does: no history row, no image resolved). */
      image: boolean;
      /** The channel's default rollout after the apply (null: none), and whether it changes. */
      rollout: SpecChannelRollout | null;
      rolloutChanged: boolean;
    }[];
    remove: string[];
  };
  roles: { write: { role: string; agents: RoleAgent[] }[]; remove: string[] };
  /** Every group the coordinator is to hold as declared, and those to remove; null: groups unchanged. */
  groups: { groups: Record<string, GroupChange>; remove: string[] } | null;
  /** Whom the planner re-plans: the whole fleet (capabilities, stale_after_s) or the servers with these roles. */
  replan: { fleet: boolean; roles: string[] };
  /** The coordinator's copy of the lock settings changes. */
  lockSettings: boolean;
  /** Every webhook the coordinator is to hold as declared, those to remove, and those whose secret is to be staged; null: unchanged. */
  webhooks: ReturnType<typeof webhooksTask> | null;
  /** The fleet's SSO access rows to write (scope) or remove (null), in the apply's batch (./access.ts). */
  access: AccessRowChange[];
  /** Servers' labels: declarations to write or drop, and the patches owed to live servers' ledgers. */
  servers: ServersPlan;
}

/** Items of one map section: added, changed, removed (prune) or unlisted. */
function diffMap<T>(
  section: SpecSection,
  current: Record<string, T>,
  desired: Record<string, T>,
  prune: boolean,
  note: (name: string, op: DiffOp) => string | undefined = () => undefined,
): DiffItem[] {
  const items: DiffItem[] = [];
  for (const name of [...new Set([...Object.keys(current), ...Object.keys(desired)])].sort()) {
    const has = Object.hasOwn(current, name);
    const wants = Object.hasOwn(desired, name);
    let op: DiffOp | null = null;
    if (wants && !has) op = "add";
    else if (wants && !sameValue(current[name], desired[name])) op = "change";
    else if (!wants) op = prune ? "remove" : "unlisted";
    if (!op) continue;
    const n = note(name, op);
    items.push({
      section,
      name,
      path: `${section}.${name}`,
      op,
      before: has ? current[name] : null,
      after: wants ? desired[name] : null,
      ...(n ? { note: n } : {}),
    });
  }
  return items;
}

const changed = (items: DiffItem[]) => items.filter((i) => i.op !== "unlisted");

/** `sent`: the SHA-256 of each secret sent with the spec, by webhook name. */
export function planSpec(
  state: FleetState,
  spec: FleetSpec,
  prune: boolean,
  sent: Record<string, string> = {},
): SpecPlan {
  // Settings: only those the spec names.
  const settings: Partial<SpecSettings> = {};
  const settingItems: DiffItem[] = [];
  for (const [key, value] of Object.entries(spec.settings ?? {}) as [keyof SpecSettings, unknown][]) {
    // The budget is an object: equal when its JSON is.
    if (value === undefined || JSON.stringify(value) === JSON.stringify(state.settings[key])) continue;
    (settings as Record<string, unknown>)[key] = value;
    settingItems.push({
      section: "settings",
      name: key,
      path: `settings.${key}`,
      op: "change",
      before: state.settings[key],
      after: value,
    });
  }

  const capabilityItems = diffMap("capabilities", state.capabilities, spec.capabilities ?? {}, prune);
  const capabilities = changed(capabilityItems).length
    ? byKey(Object.entries(prune ? (spec.capabilities ?? {}) : { ...state.capabilities, ...spec.capabilities }))
    : null;

  const channelItems = diffMap("channels", state.channels, spec.channels ?? {}, prune);
  const desiredRoles = byKey(Object.entries(spec.roles ?? {}).map(([r, p]) => [r, { agents: storedAgents(p.agents) }]));
  const roleItems = diffMap("roles", state.roles, desiredRoles, prune);

  const desiredGroups: Record<string, GroupConfig> = byKey(
    Object.entries(spec.reboot_groups ?? {}).map(([g, c]) => [g, groupConfig(c)]),
  );
  const groupItems = diffMap("reboot_groups", state.groups, desiredGroups, prune, (name, op) => {
    const busy = state.busy[name];
    if (op !== "remove" || !busy || busy.holders + busy.queued === 0) return undefined;
    return `has ${busy.holders} holder(s) and ${busy.queued} parked host(s): closed (0 slots) until they are gone, removed by a later apply`;
  });

  const groupChanges = changed(groupItems);
  let groups: SpecPlan["groups"] = null;
  if (groupChanges.length) {
    // The whole declared set, merged over what an earlier apply still owes the coordinator, so a
    // newer apply's task (which replaces the older) loses nothing of it.
    const owed = state.pending ?? { groups: {}, remove: [] };
    const remove = groupChanges.filter((i) => i.op === "remove").map((i) => i.name);
    const all: Record<string, GroupChange> = { ...owed.groups, ...desiredGroups };
    for (const name of remove) delete all[name];
    groups = {
      groups: byKey(Object.entries(all)),
      remove: [...new Set([...owed.remove.filter((n) => !Object.hasOwn(all, n)), ...remove])].sort(),
    };
  }

  const hooks = comparable(state.webhooks, spec.webhooks ?? {}, sent);
  const webhookItems = diffMap("webhooks", hooks.current, hooks.desired, prune, (name, op) =>
    op === "add" && !Object.hasOwn(sent, name)
      ? "no secret sent: the apply refuses a new webhook without one (secret_ref)"
      : undefined,
  );
  const webhookChanges = changed(webhookItems);
  const needSecret = new Set(
    webhookChanges.filter((i) => i.op === "add" && Object.hasOwn(sent, i.name)).map((i) => i.name),
  );
  for (const name of hooks.rotate) needSecret.add(name);

  const accessItems = diffMap("access", state.access, spec.access ?? {}, prune);
  const servers = planServers(state.servers, spec.servers ?? {}, prune);
  const serverItems: DiffItem[] = servers.items.map((i) => ({ section: "servers", path: `servers.${i.name}`, ...i }));

  const roleChanges = changed(roleItems);
  return {
    items: [
      ...settingItems,
      ...capabilityItems,
      ...channelItems,
      ...roleItems,
      ...groupItems,
      ...webhookItems,
      ...accessItems,
      ...serverItems,
    ],
    settings,
    capabilities,
    channels: {
      write: changed(channelItems)
        .filter((i) => i.op !== "remove")
        .map((i) => {
          const { rollout, ...input } = spec.channels![i.name];
          const previous = (i.before as FleetState["channels"][string] | null) ?? null;
          return {
            agent: i.name,
            input,
            previous: previous && { image: previous.image, version: previous.version },
            image: !previous || previous.image !== input.image || previous.version !== input.version,
            rollout: rollout ?? null,
            rolloutChanged: !sameValue(previous?.rollout ?? null, rollout ?? null),
          };
        }),
      remove: channelItems.filter((i) => i.op === "remove").map((i) => i.name),
    },
    roles: {
      write: roleChanges
        .filter((i) => i.op !== "remove")
        .map((i) => ({ role: i.name, agents: desiredRoles[i.name].agents })),
      remove: roleItems.filter((i) => i.op === "remove").map((i) => i.name),
    },
    groups,
    replan: {
      fleet: capabilities !== null || settings.stale_after_s !== undefined,
      roles: roleChanges.map((i) => i.name),
    },
    lockSettings:
      settings.lock_ttl_s !== undefined ||
      settings.allow_unknown_ids !== undefined ||
      settings.default_group_slots !== undefined ||
      settings.disruption_budget !== undefined,
    webhooks: webhookChanges.length
      ? webhooksTask(state.webhooks, spec.webhooks ?? {}, webhookItems, needSecret)
      : null,
    access: accessChanges(accessItems),
    servers,
  };
}

/** Whether the apply writes anything. */
export const writes = (p: SpecPlan) => p.items.some((i) => i.op !== "unlisted");

export function summaryOf(items: DiffItem[]) {
  const summary = { add: 0, change: 0, remove: 0, unlisted: 0 };
  for (const i of items) summary[i.op]++;
  return summary;
}
