import { sql } from "drizzle-orm";
import { check, index, integer, primaryKey, sqliteTable, text, uniqueIndex } from "drizzle-orm/sqlite-core";

/**
 * D1 is the fleet-wide index. Each server's ledger (a Durable Object) is the source of truth for
 * that server; the `servers` and `agent_instances` rows are its projection, kept convergent by the
 * ledger (retried by alarm) so fleet-wide questions never have to visit every ledger.
 */

export const fleets = sqliteTable("fleets", {
  id: text("id").primaryKey(),
  capabilities: text("capabilities", { mode: "json" }).$type<Record<string, boolean>>().notNull(),
  staleAfterS: integer("stale_after_s").notNull(),
  lockTtlS: integer("lock_ttl_s").notNull(),
  fleetlockKeyHash: text("fleetlock_key_hash"),
  allowUnknownIds: integer("allow_unknown_ids", { mode: "boolean" }).notNull().default(false),
  defaultGroupSlots: integer("default_group_slots"),
  createdAt: integer("created_at").notNull(),
});

export const servers = sqliteTable(
  "servers",
  {
    id: text("id").primaryKey(),
    fleetId: text("fleet_id").notNull(),
    hostname: text("hostname").notNull(),
    kind: text("kind", { enum: ["managed", "manual"] }).notNull(),
    roles: text("roles", { mode: "json" }).$type<string[]>().notNull(),
    rebootGroup: text("reboot_group").notNull(),
    fleetlockId: text("fleetlock_id"),
    state: text("state", {
      enum: ["provisioning", "active", "unreachable", "decommissioning", "removed"],
    }).notNull(),
    status: text("status", {
      enum: ["realized", "pending", "failed", "drifted", "unknown", "stale"],
    }).notNull(),
    desiredGeneration: integer("desired_generation").notNull(),
    reportedGeneration: integer("reported_generation"),
    bootId: text("boot_id"),
    lastSeen: integer("last_seen"),
    createdAt: integer("created_at").notNull(),
    updatedAt: integer("updated_at").notNull(),
  },
  (t) => [
    index("servers_fleet_idx").on(t.fleetId, t.id),
    index("servers_status_idx").on(t.status, t.id),
    index("servers_fleet_status_idx").on(t.fleetId, t.status, t.id),
    // Staleness marking scans only servers whose last report is old.
    index("servers_fleet_last_seen_idx").on(t.fleetId, t.lastSeen),
    // Not unique: the fleet's coordinator owns fleetlock_id uniqueness; the index only mirrors it,
    // and a uniqueness check here would make one ledger's projection wait on another's.
    index("servers_fleetlock_id_idx").on(t.fleetId, t.fleetlockId),
  ],
);

export const agentInstances = sqliteTable(
  "agent_instances",
  {
    serverId: text("server_id").notNull(),
    agent: text("agent").notNull(),
    fleetId: text("fleet_id").notNull(),
    instanceId: text("instance_id"),
    desiredImage: text("desired_image"),
    desiredVersion: text("desired_version"),
    reportedImage: text("reported_image"),
    reportedVersion: text("reported_version"),
    reportedState: text("reported_state"),
    status: text("status").notNull(),
    updatedAt: integer("updated_at").notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.serverId, t.agent] }),
    index("agent_instances_agent_idx").on(t.agent, t.serverId),
    index("agent_instances_desired_image_idx").on(t.desiredImage, t.serverId, t.agent),
    index("agent_instances_reported_image_idx").on(t.reportedImage, t.serverId, t.agent),
  ],
);

export const tokens = sqliteTable(
  "tokens",
  {
    id: text("id").primaryKey(),
    kind: text("kind", { enum: ["operator", "server"] }).notNull(),
    scope: text("scope", { enum: ["read", "write", "admin", "server"] }).notNull(),
    serverId: text("server_id"),
    name: text("name").notNull(),
    hash: text("hash").notNull(),
    createdBy: text("created_by").notNull(),
    createdAt: integer("created_at").notNull(),
    revokedAt: integer("revoked_at"),
  },
  (t) => [index("tokens_server_idx").on(t.serverId)],
);

export const auditLog = sqliteTable(
  "audit_log",
  {
    id: integer("id").primaryKey({ autoIncrement: true }),
    at: integer("at").notNull(),
    actor: text("actor").notNull(),
    action: text("action").notNull(),
    target: text("target").notNull(),
    details: text("details", { mode: "json" }).$type<unknown>(),
    /** Set for rows delivered from a Durable Object's outbox: a redelivery inserts nothing. */
    eventId: text("event_id"),
  },
  (t) => [index("audit_log_target_idx").on(t.target, t.id), uniqueIndex("audit_log_event_uq").on(t.eventId)],
);

/**
 * Self-upgrade (DESIGN §4 "Upgrade steps"). One row, id 1: the version the data is at, and where a
 * chunked step stopped. Every step commit rewrites `written_by_run` from a subquery on the running
 * run, so a runner that lost its lease fails the NOT NULL and its whole batch rolls back.
 */
export const upgradeState = sqliteTable(
  "upgrade_state",
  {
    id: integer("id").primaryKey(),
    version: integer("version").notNull(),
    cursorVersion: integer("cursor_version"),
    cursor: text("cursor"),
    writtenByRun: integer("written_by_run").notNull(),
    updatedAt: integer("updated_at").notNull(),
  },
  (t) => [check("upgrade_state_singleton", sql`${t.id} = 1`)],
);

/**
 * One row per runner that held (or holds) the upgrade lease. The partial unique index admits one
 * running row at most, as Juju 4's upgrade_info does: acquiring the lease is an INSERT.
 */
export const upgradeRuns = sqliteTable(
  "upgrade_runs",
  {
    id: integer("id").primaryKey({ autoIncrement: true }),
    runner: text("runner").notNull(),
    state: text("state", { enum: ["running", "succeeded", "failed", "expired"] }).notNull(),
    fromVersion: integer("from_version").notNull(),
    toVersion: integer("to_version"),
    tookOverFrom: integer("took_over_from"),
    startedAt: integer("started_at").notNull(),
    heartbeatAt: integer("heartbeat_at").notNull(),
    finishedAt: integer("finished_at"),
    error: text("error"),
  },
  (t) => [uniqueIndex("upgrade_runs_one_running_uq").on(t.state).where(sql`${t.state} = 'running'`)],
);

/** The history: every attempt at every step, with who ran it and how it ended. */
export const upgradeSteps = sqliteTable(
  "upgrade_steps",
  {
    id: integer("id").primaryKey({ autoIncrement: true }),
    runId: integer("run_id").notNull(),
    version: integer("version").notNull(),
    description: text("description").notNull(),
    runner: text("runner").notNull(),
    state: text("state", { enum: ["running", "applied", "failed", "abandoned"] }).notNull(),
    chunks: integer("chunks").notNull().default(0),
    startedAt: integer("started_at").notNull(),
    finishedAt: integer("finished_at"),
    error: text("error"),
  },
  (t) => [index("upgrade_steps_run_idx").on(t.runId)],
);

// ---------------------------------------------------------------------------------------------
// Rollouts (issue 9): each row is the projection of one Rollout Durable Object (its only
// writer); rollout_locks holds the one running rollout per (fleet, agent).
// ---------------------------------------------------------------------------------------------

export const rollouts = sqliteTable(
  "rollouts",
  {
    id: text("id").primaryKey(),
    fleetId: text("fleet_id").notNull(),
    agent: text("agent").notNull(),
    image: text("image").notNull(),
    version: text("version").notNull(),
    state: text("state", {
      enum: ["running", "paused", "succeeded", "failed", "cancelled", "rolling_back", "rolled_back"],
    }).notNull(),
    pass: integer("pass").notNull(),
    counts: text("counts", { mode: "json" }).$type<Record<string, number>>().notNull(),
    reason: text("reason"),
    createdBy: text("created_by").notNull(),
    createdAt: integer("created_at").notNull(),
    updatedAt: integer("updated_at").notNull(),
    endedAt: integer("ended_at"),
  },
  (t) => [
    index("rollouts_fleet_agent_idx").on(t.fleetId, t.agent, t.createdAt),
    // The cron backstop reads only rollouts that still move, oldest update first.
    index("rollouts_active_idx").on(t.state, t.updatedAt).where(sql`${t.state} IN ('running', 'paused', 'rolling_back')`),
  ],
);

export const rolloutTargets = sqliteTable(
  "rollout_targets",
  {
    rolloutId: text("rollout_id").notNull(),
    pass: integer("pass").notNull(),
    serverId: text("server_id").notNull(),
    hostname: text("hostname").notNull(),
    state: text("state", { enum: ["queued", "applying", "done", "failed", "timed_out", "skipped"] }).notNull(),
    image: text("image").notNull(),
    fromImage: text("from_image"),
    generation: integer("generation"),
    startedAt: integer("started_at"),
    endedAt: integer("ended_at"),
    reason: text("reason"),
    updatedAt: integer("updated_at").notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.rolloutId, t.pass, t.serverId] }),
    index("rollout_targets_state_idx").on(t.rolloutId, t.state, t.serverId),
    index("rollout_targets_server_idx").on(t.serverId, t.rolloutId),
  ],
);

/** At most one row per (fleet, agent): the rollout that holds it. Claimed by an INSERT. */
export const rolloutLocks = sqliteTable(
  "rollout_locks",
  {
    fleetId: text("fleet_id").notNull(),
    agent: text("agent").notNull(),
    rolloutId: text("rollout_id").notNull(),
    createdAt: integer("created_at").notNull(),
  },
  (t) => [primaryKey({ columns: [t.fleetId, t.agent] })],
);
