/**
 * The fleet as a spec sees it, read in one D1 batch (one consistent snapshot, with its intent
 * revision) plus the coordinator's groups. Reboot groups a committed apply still owes the
 * coordinator (an `apply_groups` fleet task) are shown as that apply left them: a spec is never
 * seen half applied.
 */
import { and, asc, count, eq, inArray, sql } from "drizzle-orm";
import type { Db } from "../db/client";
import { agentChannels, fleetIntent, fleets, fleetTasks, roleProfiles, servers } from "../db/schema";
import type { Env } from "../env";
import type { GroupsSpec } from "../fleetlock/spec-groups";
import { fleetSettings, type FleetRow } from "../fleets/store";
import { coordinatorOf } from "../objects/stubs";
import type { RoleAgent } from "../planner/plan";
import type { WebhooksSpec } from "../webhooks/spec";
import { byKey } from "./canonical";
import { configOf, groupConfig, type GroupConfig, type SpecRebootGroup } from "./groups";
import { SPEC_API_VERSION, SPEC_KIND, type SpecSettings } from "./schemas";
import type { Scope } from "../domain/enums";
import { fleetMappingsOf } from "../sso/store";
import { accessForm } from "./access";
import { specForm, type WebhookState } from "./webhooks";
import type { SpecChannelRollout } from "./rollout-defaults";
import { declaredQuery, liveLabels, serversSpecOf, type ServerLabelsTask, type ServersState } from "./spec-servers";
import { mergeLabels } from "../model/server/labels";

export interface FleetState {
  row: FleetRow;
  rev: number;
  settings: Required<SpecSettings>;
  capabilities: Record<string, boolean>;
  /** Each agent's channel, with its default rollout when it has one. */
  channels: Record<string, { image: string; version: string; rollout?: SpecChannelRollout }>;
  roles: Record<string, { agents: RoleAgent[] }>;
  groups: Record<string, GroupConfig>;
  /** Per group: holders and parked hosts (a pruned group that has any only closes). */
  busy: Record<string, { holders: number; queued: number }>;
  /** The groups of an apply not yet delivered to the coordinator. */
  pending: GroupsSpec | null;
  /** The coordinator's webhooks as declared (an apply's still owed shown as applied), and their secrets' digests. */
  webhooks: WebhookState;
  /** The `servers` section: the declaration, what its last apply still owes the ledgers, live labels. */
  servers: ServersState;
  /** SSO access to the fleet its spec declares: `group:…`/`email:…` → scope. */
  access: Record<string, Scope>;
}

/** The state with the live labels of the hostnames the spec names or the fleet declares, owed patches merged in. */
export async function withLiveLabels(db: Db, state: FleetState, named: string[]): Promise<FleetState> {
  const hostnames = [...new Set([...named, ...Object.keys(state.servers.declared)])];
  const live = await liveLabels(db, state.row.id, hostnames);
  for (const [h, patch] of Object.entries(state.servers.owed)) if (live[h]) live[h] = mergeLabels(live[h], patch);
  return { ...state, servers: { ...state.servers, live } };
}

/**
 * `orNew`: the row a fleet that does not exist would have (a spec that creates it is diffed and
 * applied against it: no channels, roles or groups, its settings' defaults). `exists`: whether the
 * row is D1's.
 */
export async function readFleetState(
  env: Env,
  db: Db,
  fleet: string,
  orNew?: () => FleetRow,
): Promise<{ state: FleetState; exists: boolean } | null> {
  const [fleetRows, revRows, roleRows, channelRows, taskRows, declaredRows, accessRows] = await db.batch([
    db.select().from(fleets).where(eq(fleets.id, fleet)),
    db.select({ rev: fleetIntent.rev }).from(fleetIntent).where(eq(fleetIntent.fleetId, fleet)),
    db
      .select({ role: roleProfiles.role, agents: roleProfiles.agents })
      .from(roleProfiles)
      .where(eq(roleProfiles.fleetId, fleet)),
    db
      .select({
        agent: agentChannels.agent,
        image: agentChannels.image,
        version: agentChannels.version,
        rollout: agentChannels.rollout,
      })
      .from(agentChannels)
      .where(eq(agentChannels.fleetId, fleet)),
    db
      .select({ kind: fleetTasks.kind, payload: fleetTasks.payload })
      .from(fleetTasks)
      .where(
        and(
          eq(fleetTasks.fleetId, fleet),
          inArray(fleetTasks.kind, ["apply_groups", "apply_webhooks", "apply_server_labels"]),
        ),
      ),
    declaredQuery(db, fleet),
    fleetMappingsOf(db, fleet),
  ]);
  const exists = fleetRows.length > 0;
  const row = fleetRows[0] ?? orNew?.();
  if (!row) return null;
  // A fleet that does not exist has nothing in a coordinator (a deleted one's is wiped before its
  // id is free again), and asking would create one and store the settings there: a read-scoped
  // diff may name any fleet.
  const coordinator = coordinatorOf(env, fleet);
  const [views, hooks] = exists
    ? await Promise.all([coordinator.listGroups(fleetSettings(row)), coordinator.webhookSpecState()])
    : [[], {}];
  // A group's view shows its gates' verdicts under `gates`; what it declares is `own_gates`.
  const groups = new Map(views.map((v) => [v.name, configOf({ ...v, gates: v.own_gates })]));
  const task = <T>(kind: string) => (taskRows.find((t) => t.kind === kind)?.payload as T | undefined) ?? null;
  const pending = task<GroupsSpec>("apply_groups");
  if (pending) {
    for (const name of pending.remove) groups.delete(name);
    for (const [name, change] of Object.entries(pending.groups))
      groups.set(name, groupConfig(change as SpecRebootGroup));
  }
  const state: FleetState = {
    row,
    rev: revRows[0]?.rev ?? 0,
    settings: {
      stale_after_s: row.staleAfterS,
      lock_ttl_s: row.lockTtlS,
      allow_unknown_ids: row.allowUnknownIds,
      default_group_slots: row.defaultGroupSlots,
      disruption_budget: row.disruptionBudget ?? null,
      image_policy: row.imagePolicy,
    },
    capabilities: byKey(Object.entries(row.capabilities)),
    channels: byKey(
      channelRows.map((c) => [
        c.agent,
        { image: c.image, version: c.version, ...(c.rollout ? { rollout: c.rollout as SpecChannelRollout } : {}) },
      ]),
    ),
    roles: byKey(roleRows.map((r) => [r.role, { agents: r.agents }])),
    groups: byKey(groups),
    busy: Object.fromEntries(views.map((v) => [v.name, { holders: v.holders.length, queued: v.queue.length }])),
    pending,
    webhooks: webhookState(hooks, task<WebhooksSpec>("apply_webhooks")),
    // Live labels are read for the hostnames a spec names, once it is known (withLiveLabels).
    servers: {
      declared: byKey(declaredRows.map((r) => [r.hostname, r.labels])),
      owed: task<ServerLabelsTask>("apply_server_labels")?.servers ?? {},
      live: {},
    },
    access: accessForm(accessRows),
  };
  return { state, exists };
}

function webhookState(
  kept: Awaited<ReturnType<ReturnType<typeof coordinatorOf>["webhookSpecState"]>>,
  pending: WebhooksSpec | null,
): WebhookState {
  const declared: WebhookState["declared"] = {};
  const digests: WebhookState["digests"] = {};
  for (const [name, { secret_sha256, ...w }] of Object.entries(kept)) {
    declared[name] = w;
    digests[name] = secret_sha256;
  }
  if (pending) {
    for (const name of pending.remove) delete declared[name];
    for (const [name, { secret_stage, ...w }] of Object.entries(pending.webhooks)) {
      declared[name] = w;
      if (secret_stage) delete digests[name];
    }
  }
  return { declared: byKey(Object.entries(declared)), digests, pending };
}

/** The fleet as a spec document: what `GET …/spec` answers and `hm export` writes. */
export const specOf = (s: FleetState) => ({
  apiVersion: SPEC_API_VERSION as typeof SPEC_API_VERSION,
  kind: SPEC_KIND as typeof SPEC_KIND,
  fleet: s.row.id,
  settings: s.settings,
  capabilities: s.capabilities,
  channels: s.channels,
  roles: s.roles,
  reboot_groups: s.groups,
  webhooks: byKey(Object.entries(s.webhooks.declared).map(([name, w]) => [name, specForm(w)])),
  servers: serversSpecOf(s.servers),
  access: s.access,
});

const SAMPLE = 20;

/** The servers a change would have the planner re-plan: those with the roles, or the whole fleet. */
export async function serversToReplan(db: Db, fleet: string, scope: { fleet: boolean; roles: string[] }) {
  if (!scope.fleet && scope.roles.length === 0) return { servers: 0, sample: [] };
  const where = and(
    eq(servers.fleetId, fleet),
    sql`${servers.state} NOT IN ('removed', 'decommissioning')`,
    scope.fleet
      ? undefined
      : sql`EXISTS (SELECT 1 FROM json_each(${servers.roles}) WHERE value IN (SELECT value FROM json_each(${JSON.stringify(scope.roles)})))`,
  );
  const [total, sample] = await db.batch([
    db.select({ n: count() }).from(servers).where(where),
    db
      .select({ id: servers.id, hostname: servers.hostname })
      .from(servers)
      .where(where)
      .orderBy(asc(servers.id))
      .limit(SAMPLE),
  ]);
  return { servers: total[0]?.n ?? 0, sample };
}
