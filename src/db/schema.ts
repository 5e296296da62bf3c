import { sql } from "drizzle-orm";
import { check, index, integer, primaryKey, sqliteTable, text, uniqueIndex } from "drizzle-orm/sqlite-core";
import {
  ROLLOUT_STATES,
  ROLLOUT_TARGET_STATES,
  AGENT_STATES,
  AGENT_STATUSES,
  SERVER_KINDS,
  SERVER_STATES,
  SERVER_STATUSES,
  TOKEN_KINDS,
  TOKEN_SCOPES,
  UPGRADE_RUN_STATES,
  UPGRADE_STEP_STATES,
} from "../domain/enums";
// Fleet intent; kept apart from the list above to keep merges clean.
import { FLEET_TASK_KINDS } from "../domain/enums";
// Operator console.
import { OPERATOR_SCOPES } from "../domain/enums";
// The image catalog.
import type { CatalogFields } from "../domain/images";
import type { DisruptionBudget } from "../domain/disruption-budget";

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
  /** The fleet's disruption budget (src/fleetlock/budget.ts); null: none. */
  disruptionBudget: text("disruption_budget", { mode: "json" }).$type<DisruptionBudget | null>(),
  createdAt: integer("created_at").notNull(),
  /** "catalog": desired configs may name only catalog images; "any": free-form image strings. */
  imagePolicy: text("image_policy", { enum: ["catalog", "any"] })
    .notNull()
    .default("any"),
  /**
   * Whether the fleet's coordinator wants its ledgers' drift-only health events (a webhook asks
   * for `server.drifted`). A new fleet starts at 0 (no webhook yet; POST /v1/fleets and a spec
   * that creates one); after that only the coordinator writes it (src/fleetlock/health-watch.ts),
   * before the change that turns it on is answered; read by a ledger in its projection's batch.
   * The default 1, for fleets from before the column, means unknown: send.
   */
  healthWatch: integer("health_watch").notNull().default(1),
});

export const servers = sqliteTable(
  "servers",
  {
    id: text("id").primaryKey(),
    fleetId: text("fleet_id").notNull(),
    hostname: text("hostname").notNull(),
    /** hostnameSortKey(hostname), written with it by the ledger's projection: lists page naturally. */
    hostnameSort: text("hostname_sort").notNull().default(""),
    kind: text("kind", { enum: SERVER_KINDS }).notNull(),
    roles: text("roles", { mode: "json" }).$type<string[]>().notNull(),
    /** The server's labels (its ledger's), shown in lists; filtered through server_labels. */
    labels: text("labels", { mode: "json" }).$type<Record<string, string>>().notNull().default({}),
    rebootGroup: text("reboot_group").notNull(),
    fleetlockId: text("fleetlock_id"),
    state: text("state", { enum: SERVER_STATES }).notNull(),
    status: text("status", { enum: SERVER_STATUSES }).notNull(),
    desiredGeneration: integer("desired_generation").notNull(),
    reportedGeneration: integer("reported_generation"),
    bootId: text("boot_id"),
    lastSeen: integer("last_seen"),
    /** last_seen + the fleet's stale_after (null while nothing is expected): the cron's deadline. */
    staleAt: integer("stale_at"),
    createdAt: integer("created_at").notNull(),
    updatedAt: integer("updated_at").notNull(),
  },
  (t) => [
    index("servers_fleet_idx").on(t.fleetId, t.id),
    index("servers_status_idx").on(t.status, t.id),
    // Staleness marking scans only servers whose last report is old.
    index("servers_fleet_last_seen_idx").on(t.fleetId, t.lastSeen),
    // Staleness marking: only rows not yet stale, by deadline, so a tick reads what crossed.
    index("servers_stale_at_idx")
      .on(t.staleAt)
      .where(sql`${t.status} != 'stale'`),
    // Not unique: the fleet's coordinator owns fleetlock_id uniqueness; the index only mirrors it,
    // and a uniqueness check here would make one ledger's projection wait on another's.
    index("servers_fleetlock_id_idx").on(t.fleetId, t.fleetlockId),
    // The fleet summary (console, hm status): servers counted by state and status as read now
    // (stale derived from stale_at) in one aggregate that reads only this index.
    index("servers_fleet_state_status_idx").on(t.fleetId, t.state, t.status, t.staleAt),
    // Servers are named by hostname (unique per fleet among live servers) and listed by hostname:
    // a fleet's page, a hostname prefix, a hostname across fleets.
    index("servers_fleet_hostname_idx").on(t.fleetId, t.hostname, t.id),
    index("servers_hostname_idx").on(t.hostname, t.id),
    // GET /v1/servers pages in natural order (sim-2 before sim-10): with a fleet, a status, or neither,
    // each page is read in order from its own index (hostname breaks ties of equal keys, then id).
    // A fleet's servers of one status (the console's list filtered by status, hm status's lists of
    // failed and drifted servers, the drift check): a page reads its own rows, not the fleet's.
    index("servers_fleet_status_sort_idx").on(t.fleetId, t.status, t.hostnameSort, t.hostname, t.id),
    index("servers_fleet_sort_idx").on(t.fleetId, t.hostnameSort, t.hostname, t.id),
    index("servers_sort_idx").on(t.hostnameSort, t.hostname, t.id),
  ],
);

/**
 * One row per label of a server, written only by the server's ledger's projection and only when
 * its labels change: `?label=zone=eu-1a` reads the servers that have it from the index below
 * instead of parsing the labels of every server of the fleet.
 */
export const serverLabels = sqliteTable(
  "server_labels",
  {
    serverId: text("server_id").notNull(),
    fleetId: text("fleet_id").notNull(),
    key: text("key").notNull(),
    value: text("value").notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.serverId, t.key] }),
    index("server_labels_fleet_key_value_idx").on(t.fleetId, t.key, t.value, t.serverId),
  ],
);

/**
 * The labels a fleet spec's `servers` section declares, by hostname: the merge patch of every
 * apply that named the hostname (a null value removes its key). Committed with the apply; a live
 * server gets it through its ledger (the `apply_server_labels` fleet task, as PATCH does), and a
 * server registered later under that hostname starts with it merged over its own labels.
 */
export const specServerLabels = sqliteTable(
  "spec_server_labels",
  {
    fleetId: text("fleet_id").notNull(),
    hostname: text("hostname").notNull(),
    labels: text("labels", { mode: "json" }).$type<Record<string, string | null>>().notNull(),
    updatedAt: integer("updated_at").notNull(),
    updatedBy: text("updated_by").notNull(),
  },
  (t) => [primaryKey({ columns: [t.fleetId, t.hostname] })],
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
    reportedState: text("reported_state", { enum: AGENT_STATES }),
    status: text("status", { enum: AGENT_STATUSES }).notNull(),
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
    kind: text("kind", { enum: TOKEN_KINDS }).notNull(),
    scope: text("scope", { enum: TOKEN_SCOPES }).notNull(),
    serverId: text("server_id"),
    name: text("name").notNull(),
    hash: text("hash").notNull(),
    createdBy: text("created_by").notNull(),
    createdAt: integer("created_at").notNull(),
    revokedAt: integer("revoked_at"),
    /** The fleets an operator token may act on: "*" or fleet names (src/domain/principal.ts). */
    fleets: text("fleets", { mode: "json" })
      .$type<"*" | string[]>()
      .notNull()
      .default(sql`'"*"'`),
    description: text("description"),
    /** ms epoch after which the token is refused; null = never. */
    expiresAt: integer("expires_at"),
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
  (t) => [
    index("audit_log_target_idx").on(t.target, t.id),
    uniqueIndex("audit_log_event_uq").on(t.eventId),
    // The day cut and the export's `since` find rows by date (src/audit/store.ts): without it, a scan of the table.
    index("audit_log_at_idx").on(t.at),
  ],
);

/**
 * Self-upgrade (docs/design.md §4 "Upgrade steps"). One row, id 1: the version the data is at, and where a
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
    state: text("state", { enum: UPGRADE_RUN_STATES }).notNull(),
    fromVersion: integer("from_version").notNull(),
    toVersion: integer("to_version"),
    tookOverFrom: integer("took_over_from"),
    startedAt: integer("started_at").notNull(),
    heartbeatAt: integer("heartbeat_at").notNull(),
    finishedAt: integer("finished_at"),
    error: text("error"),
  },
  (t) => [
    uniqueIndex("upgrade_runs_one_running_uq")
      .on(t.state)
      .where(sql`${t.state} = 'running'`),
  ],
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
    state: text("state", { enum: UPGRADE_STEP_STATES }).notNull(),
    chunks: integer("chunks").notNull().default(0),
    startedAt: integer("started_at").notNull(),
    finishedAt: integer("finished_at"),
    error: text("error"),
    /**
     * When the fleets' webhooks were handed this step's upgrade.step_applied / step_failed event
     * (the row is the outbox: the cron delivers finished rows still NULL; a running step's stays NULL).
     */
    notifiedAt: integer("notified_at"),
  },
  (t) => [
    index("upgrade_steps_run_idx").on(t.runId),
    // The cron reads only the finished steps whose event is still owed.
    index("upgrade_steps_unnotified_idx")
      .on(t.id)
      .where(sql`${t.notifiedAt} IS NULL AND ${t.state} != 'running'`),
  ],
);

/**
 * Where a cron job that walks a time column got to (the server.stale sweep: `stale_events`). A
 * WITHOUT ROWID table (migration 0026, by hand: drizzle cannot declare it): found by name only, a
 * row inserted is one row written, not the row and its primary key's index entry.
 */
export const cronCursors = sqliteTable("cron_cursors", {
  name: text("name").primaryKey(),
  at: integer("at").notNull(),
});

// ---------------------------------------------------------------------------------------------
// Fleet intent: agent channels, role profiles, planner marks, staleness deadline.
// Kept in one block at the end of the file so merges with the objects refactor stay clean.
// ---------------------------------------------------------------------------------------------

/** The image the fleet currently wants for an agent (docs/design.md §3 "Agent channel"). */
export const agentChannels = sqliteTable(
  "agent_channels",
  {
    fleetId: text("fleet_id").notNull(),
    agent: text("agent").notNull(),
    image: text("image").notNull(),
    version: text("version").notNull(),
    /** The catalog image the channel names, as resolved when it was set (null: a free-form image). */
    catalog: text("catalog", { mode: "json" }).$type<CatalogFields>(),
    /**
     * How the agent's rollouts go by default (a fleet spec's `channels.<agent>.rollout`): used by
     * POST /v1/rollouts when the request carries no strategy. null: one wave, as without a strategy.
     * The strategy is src/model/strategy.ts's `StrategyInput`, parsed when written and read (the
     * model imports this file, so it is not named here).
     */
    rollout: text("rollout", { mode: "json" }).$type<{ strategy: unknown }>(),
    updatedAt: integer("updated_at").notNull(),
    updatedBy: text("updated_by").notNull(),
  },
  (t) => [primaryKey({ columns: [t.fleetId, t.agent] })],
);

/** Every change of a channel, newest last; the channel row is the latest of these. */
export const agentChannelHistory = sqliteTable(
  "agent_channel_history",
  {
    id: integer("id").primaryKey({ autoIncrement: true }),
    fleetId: text("fleet_id").notNull(),
    agent: text("agent").notNull(),
    image: text("image").notNull(),
    version: text("version").notNull(),
    previousImage: text("previous_image"),
    previousVersion: text("previous_version"),
    at: integer("at").notNull(),
    actor: text("actor").notNull(),
  },
  (t) => [index("agent_channel_history_idx").on(t.fleetId, t.agent, t.id)],
);

/** A role's agents, each optionally conditioned on a fleet capability (`when`). */
export const roleProfiles = sqliteTable(
  "role_profiles",
  {
    fleetId: text("fleet_id").notNull(),
    role: text("role").notNull(),
    agents: text("agents", { mode: "json" }).$type<{ name: string; when?: string }[]>().notNull(),
    updatedAt: integer("updated_at").notNull(),
    updatedBy: text("updated_by").notNull(),
  },
  (t) => [primaryKey({ columns: [t.fleetId, t.role] })],
);

/**
 * Servers whose plan inputs changed and whose ledger has not yet applied them: the planner's
 * durable work list. A change of inputs marks the servers it touches in the same D1 batch; the
 * planner deletes a mark only when the `rev` it read is still the row's (a newer change re-marks).
 * The cron backstop reads only this table, oldest first, never the servers table.
 */
/** A counter per fleet, bumped by every change of its plan inputs (roles, channels, capabilities,
 * settings); a ledger ignores inputs older than the newest it applied, so a late planner run
 * cannot undo a newer one. */
export const fleetIntent = sqliteTable("fleet_intent", {
  fleetId: text("fleet_id").primaryKey(),
  rev: integer("rev").notNull(),
});

export const planMarks = sqliteTable(
  "plan_marks",
  {
    serverId: text("server_id").primaryKey(),
    fleetId: text("fleet_id").notNull(),
    rev: integer("rev").notNull(),
    markedAt: integer("marked_at").notNull(),
    attempts: integer("attempts").notNull().default(0),
  },
  (t) => [index("plan_marks_marked_at_idx").on(t.markedAt)],
);

/**
 * Work on a fleet's coordinator (a Durable Object) that follows a D1 change: `push_settings` after a
 * PATCH of its lock settings, `apply_groups` after a fleet spec's apply changed its reboot groups, `wipe` after the fleet's deletion (its groups and FleetLock key go; the
 * id cannot be created again before). Each row commits in the batch of the change that needs it, is
 * tried at once, and is retried by the cron until done; `rev` lets a newer change supersede an
 * older one without the older one's completion deleting it.
 */
export const fleetTasks = sqliteTable(
  "fleet_tasks",
  {
    fleetId: text("fleet_id").notNull(),
    kind: text("kind", { enum: FLEET_TASK_KINDS }).notNull(),
    rev: integer("rev").notNull(),
    createdAt: integer("created_at").notNull(),
    attempts: integer("attempts").notNull().default(0),
    /** `apply_groups`: the reboot groups a fleet spec declares (src/specs/), delivered as they are. */
    payload: text("payload", { mode: "json" }).$type<unknown>(),
  },
  (t) => [primaryKey({ columns: [t.fleetId, t.kind] })],
);

// ---------------------------------------------------------------------------------------------
// Rollouts: each row is the projection of one Rollout Durable Object (its only
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
    /** The catalog image the rollout installs, as resolved when it was created (null: free-form). */
    catalog: text("catalog", { mode: "json" }).$type<CatalogFields>(),
    state: text("state", { enum: ROLLOUT_STATES }).notNull(),
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
    index("rollouts_active_idx")
      .on(t.state, t.updatedAt)
      .where(sql`${t.state} IN ('running', 'paused', 'rolling_back')`),
  ],
);

export const rolloutTargets = sqliteTable(
  "rollout_targets",
  {
    rolloutId: text("rollout_id").notNull(),
    pass: integer("pass").notNull(),
    serverId: text("server_id").notNull(),
    hostname: text("hostname").notNull(),
    state: text("state", { enum: ROLLOUT_TARGET_STATES }).notNull(),
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
    /**
     * The SHA-256 of the start request that claimed (principal, fleet, agent, image, the strategy
     * as resolved, …): the same request sent again adopts the claim instead of being refused by it.
     * Null for a claim a rollback or the object itself took.
     */
    fingerprint: text("fingerprint"),
  },
  (t) => [primaryKey({ columns: [t.fleetId, t.agent] })],
);

// ---------------------------------------------------------------------------------------------
// Operator console: browser sessions. The cookie carries a random session id; only its
// SHA-256 is stored, so a copy of this table opens no session. The operator token the console
// calls the API with is sealed with a key derived from that same id (AES-GCM): the table alone
// cannot unseal it either.
// ---------------------------------------------------------------------------------------------

export const consoleSessions = sqliteTable(
  "console_sessions",
  {
    idHash: text("id_hash").primaryKey(),
    /** The operator token's id ("bootstrap" for ADMIN_TOKEN); a revoked token ends its sessions. */
    tokenId: text("token_id").notNull(),
    scope: text("scope", { enum: OPERATOR_SCOPES }).notNull(),
    csrf: text("csrf").notNull(),
    sealedToken: text("sealed_token").notNull(),
    createdAt: integer("created_at").notNull(),
    expiresAt: integer("expires_at").notNull(),
  },
  (t) => [index("console_sessions_expires_idx").on(t.expiresAt), index("console_sessions_token_idx").on(t.tokenId)],
);

// ---------------------------------------------------------------------------------------------
// Enrollment (src/enrollment/): a fleet's enrollment tokens (`hme.<id>.<secret>`, only the hash
// kept), and one row per machine a token enrolled. The enrollment row is written in the same
// batch as the use it consumes and before the server is registered, under the server id the
// registration will use: a retry from that machine (its first answer lost, or a crash between the
// registration and the answer) finds it and consumes no second use.
// ---------------------------------------------------------------------------------------------

export const enrollmentTokens = sqliteTable(
  "enrollment_tokens",
  {
    id: text("id").primaryKey(),
    fleetId: text("fleet_id").notNull(),
    name: text("name"),
    hash: text("hash").notNull(),
    roles: text("roles", { mode: "json" }).$type<string[]>().notNull(),
    rebootGroup: text("reboot_group").notNull(),
    kind: text("kind", { enum: SERVER_KINDS }).notNull(),
    hostnamePattern: text("hostname_pattern"),
    /** Labels every server it enrolls gets (the enroll body's own labels win on a shared key). */
    labels: text("labels", { mode: "json" }).$type<Record<string, string>>().notNull().default({}),
    maxUses: integer("max_uses").notNull(),
    uses: integer("uses").notNull().default(0),
    expiresAt: integer("expires_at").notNull(),
    createdBy: text("created_by").notNull(),
    createdAt: integer("created_at").notNull(),
    revokedAt: integer("revoked_at"),
    lastUsedAt: integer("last_used_at"),
    /**
     * The creator's Idempotency-Key, kept as long as the row: the same key from the same creator
     * is the same create (a retry whose first answer was lost), answered with this token.
     */
    idempotencyKey: text("idempotency_key"),
    /** The sha256 of the create request the key was first sent with: the same key with another request is refused. */
    requestDigest: text("request_digest"),
  },
  (t) => [
    index("enrollment_tokens_fleet_idx").on(t.fleetId, t.id),
    // NULLs are distinct in a unique index: only keyed creates are held to it.
    uniqueIndex("enrollment_tokens_idempotency_uq").on(t.createdBy, t.idempotencyKey),
    check("enrollment_tokens_uses_ck", sql`${t.uses} >= 0 AND ${t.uses} <= ${t.maxUses}`),
  ],
);

export const enrollments = sqliteTable(
  "enrollments",
  {
    tokenId: text("token_id").notNull(),
    machineId: text("machine_id").notNull(),
    serverId: text("server_id").notNull(),
    hostname: text("hostname").notNull(),
    createdAt: integer("created_at").notNull(),
  },
  (t) => [primaryKey({ columns: [t.tokenId, t.machineId] })],
);
// The image catalog: what a desired config may name, with the bytes (R2, binding IMAGES, key
// images/<id>) or the registry reference a host installs it from. An image's id and content never
// change; an upload in progress is a row in state 'uploading' with its R2 multipart upload and the
// parts received so far (the R2 binding cannot list a multipart upload's parts).
// ---------------------------------------------------------------------------------------------

export const images = sqliteTable(
  "images",
  {
    id: text("id").primaryKey(),
    name: text("name").notNull(),
    version: text("version").notNull(),
    kind: text("kind", { enum: ["oci-archive", "tarball", "oci-ref"] }).notNull(),
    digest: text("digest").notNull(),
    size: integer("size").notNull(),
    ref: text("ref"),
    labels: text("labels", { mode: "json" }).$type<Record<string, string>>().notNull(),
    description: text("description"),
    state: text("state", { enum: ["uploading", "ready"] }).notNull(),
    /** The R2 multipart upload while state is 'uploading'; null once ready (and for oci-ref). */
    uploadId: text("upload_id"),
    partSize: integer("part_size"),
    createdAt: integer("created_at").notNull(),
    createdBy: text("created_by").notNull(),
  },
  (t) => [
    uniqueIndex("images_name_version_idx").on(t.name, t.version),
    // The abandoned-upload sweep reads only uploads, oldest first.
    index("images_uploading_idx")
      .on(t.createdAt)
      .where(sql`${t.state} = 'uploading'`),
  ],
);

/** Parts of an upload in progress that R2 has accepted, with the etag its completion needs. */
export const imageParts = sqliteTable(
  "image_parts",
  {
    imageId: text("image_id").notNull(),
    part: integer("part").notNull(),
    etag: text("etag").notNull(),
    size: integer("size").notNull(),
    uploadedAt: integer("uploaded_at").notNull(),
  },
  (t) => [primaryKey({ columns: [t.imageId, t.part] })],
);

/**
 * R2 objects and uploads owed a delete: written in the same batch that forgets their image, removed
 * once R2 has let go, so a crash between the two leaves work for the cron, not an orphan.
 */
export const imageDeletions = sqliteTable("image_deletions", {
  key: text("key").primaryKey(),
  uploadId: text("upload_id"),
  at: integer("at").notNull(),
});

// ---------------------------------------------------------------------------------------------
// History: the cron's rollup of each fleet (src/history/), kept 30 days.
// ---------------------------------------------------------------------------------------------

/**
 * One row per fleet per period (5 minutes) in which a figure changed; a period like the one before
 * writes nothing, so a quiet fleet costs no rows. Each row is a whole snapshot (servers by status,
 * each agent's reported versions) plus the reboots and rollouts counted since the previous rollup,
 * so a reader needs only the rows of its window and the one before it.
 */
export const fleetHistory = sqliteTable(
  "fleet_history",
  {
    fleetId: text("fleet_id").notNull(),
    /** The start of the period (ms epoch, a multiple of the period). */
    at: integer("at").notNull(),
    /** Servers by status (removed excluded) and their total. */
    servers: text("servers", { mode: "json" }).$type<Record<string, number>>().notNull(),
    /** agent → {versions: reported version → servers, none: not reported yet, other: versions past the bound}. */
    versions: text("versions", { mode: "json" })
      .$type<Record<string, { versions: Record<string, number>; none: number; other: number }>>()
      .notNull(),
    /** FleetLock reboot grants to hosts since the previous rollup. */
    reboots: integer("reboots").notNull(),
    /** Rollouts started since the previous rollup. */
    rollouts: integer("rollouts").notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.fleetId, t.at] }),
    // Pruning reads only the rows past the retention.
    index("fleet_history_at_idx").on(t.at),
  ],
);

// ---------------------------------------------------------------------------------------------
// Sign-in through an identity provider (src/sso/): who gets what, by email or group, and the
// sessions minted for signed-in users. A session IS a short-lived operator token (a `tokens` row
// with expires_at, scope and fleets from the mapping), so one code path authenticates everything;
// `sso_sessions` only says whose it is and through which provider, for the admins' list.
// ---------------------------------------------------------------------------------------------

export const ssoMappings = sqliteTable(
  "sso_mappings",
  {
    id: text("id").primaryKey(),
    /** "email" (lower-cased) or "group" (as the provider spells it). */
    kind: text("kind", { enum: ["email", "group"] }).notNull(),
    value: text("value").notNull(),
    scope: text("scope", { enum: OPERATOR_SCOPES }).notNull(),
    fleets: text("fleets", { mode: "json" }).$type<"*" | string[]>().notNull(),
    description: text("description"),
    createdBy: text("created_by").notNull(),
    createdAt: integer("created_at").notNull(),
  },
  (t) => [uniqueIndex("sso_mappings_match_idx").on(t.kind, t.value)],
);

/**
 * SSO mappings a fleet's spec declares (its `access:` section, src/sso/spec-access.ts): each gives
 * its email or group the scope on that one fleet and no other. Written only by the spec's apply,
 * in its batch; a fleet's deletion removes its rows with the fleet.
 */
export const fleetSsoMappings = sqliteTable(
  "fleet_sso_mappings",
  {
    fleetId: text("fleet_id").notNull(),
    /** "email" (lower-cased) or "group" (as the provider spells it). */
    kind: text("kind", { enum: ["email", "group"] }).notNull(),
    value: text("value").notNull(),
    scope: text("scope", { enum: OPERATOR_SCOPES }).notNull(),
  },
  // A sign-in looks its user up by email and groups, across fleets.
  (t) => [
    primaryKey({ columns: [t.fleetId, t.kind, t.value] }),
    index("fleet_sso_mappings_match_idx").on(t.kind, t.value),
  ],
);

export const ssoSessions = sqliteTable(
  "sso_sessions",
  {
    /** The operator token this session is. */
    tokenId: text("token_id").primaryKey(),
    provider: text("provider", { enum: ["access", "oidc"] }).notNull(),
    subject: text("subject").notNull(),
    email: text("email"),
    /** "console" or "cli": where the user signed in. */
    client: text("client", { enum: ["console", "cli"] }).notNull(),
    createdAt: integer("created_at").notNull(),
    expiresAt: integer("expires_at").notNull(),
  },
  (t) => [index("sso_sessions_expires_idx").on(t.expiresAt)],
);

/**
 * OpenID Connect sign-ins under way: one row from the redirect to the provider until the callback
 * (console) or until `hm` exchanges its one-time code (cli). Consumed by deleting it, so a state or
 * a code works once; rows older than their expiry are deleted as new ones come.
 */
export const ssoLogins = sqliteTable(
  "sso_logins",
  {
    /** SHA-256 of the `state` sent to the provider. */
    stateHash: text("state_hash").primaryKey(),
    client: text("client", { enum: ["console", "cli"] }).notNull(),
    /** The PKCE code_verifier for the provider (S256 challenge sent). */
    verifier: text("verifier").notNull(),
    nonce: text("nonce").notNull(),
    /** Console: the page to return to; cli: hm's loopback URL. */
    returnTo: text("return_to").notNull(),
    /** Console: SHA-256 of the browser's hm_sso cookie, so the callback completes only in that browser. */
    browserHash: text("browser_hash"),
    /** Cli: hm's own S256 challenge; its verifier is needed to exchange the one-time code. */
    cliChallenge: text("cli_challenge"),
    /** Cli, after the callback: SHA-256 of the one-time code handed to hm's loopback listener. */
    codeHash: text("code_hash"),
    identity: text("identity", { mode: "json" }).$type<{
      subject: string;
      email: string | null;
      groups: string[];
    }>(),
    createdAt: integer("created_at").notNull(),
    expiresAt: integer("expires_at").notNull(),
  },
  (t) => [uniqueIndex("sso_logins_code_idx").on(t.codeHash), index("sso_logins_expires_idx").on(t.expiresAt)],
);
