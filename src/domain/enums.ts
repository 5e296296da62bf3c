/**
 * Every closed set of values the API, the ledgers and D1 share, defined once. zod schemas
 * (`z.enum(X)`), drizzle column enums (`text(col, { enum: X })`) and TypeScript types
 * (`(typeof X)[number]`) all read these, so they cannot drift apart and need no casts where they meet.
 * Pure: no imports, safe for the Node-side client and scripts.
 */

/** A server's place in its lifecycle (docs/design.md §3). */
export const SERVER_STATES = ["provisioning", "active", "decommissioning", "removed"] as const;
export type ServerState = (typeof SERVER_STATES)[number];

/** A server's computed status (docs/design.md §4), from desired config + last report. */
export const SERVER_STATUSES = ["realized", "pending", "failed", "drifted", "unknown", "stale"] as const;
export type ServerStatus = (typeof SERVER_STATUSES)[number];

/** `managed`: the provisioner owns the machine; `manual`: a borrowed machine. */
export const SERVER_KINDS = ["managed", "manual"] as const;
export type ServerKind = (typeof SERVER_KINDS)[number];

/** What a desired config orders its host to do with its agents. */
export const LIFECYCLES = ["run", "terminate", "uninstall"] as const;

/** An agent's state as its host reports it. */
export const AGENT_STATES = ["running", "stopped", "failed"] as const;

/** The operation a host's reported error belongs to. */
export const ERROR_OPS = ["install", "update", "remove", "start"] as const;

/** One agent's computed status on one server. */
export const AGENT_STATUSES = [
  "realized",
  "pending",
  "failed",
  "drifted",
  "removal_pending",
  "removal_failed",
] as const;
export type AgentStatus = (typeof AGENT_STATUSES)[number];

/** Who a token belongs to. */
export const TOKEN_KINDS = ["operator", "server"] as const;
export type TokenKind = (typeof TOKEN_KINDS)[number];

/** Operator scopes, weakest first: each includes the ones before it. */
export const OPERATOR_SCOPES = ["read", "write", "admin"] as const;
export type Scope = (typeof OPERATOR_SCOPES)[number];
/** A token row's scope: an operator scope, or `server` for a host's own token. */
export const TOKEN_SCOPES = [...OPERATOR_SCOPES, "server"] as const;

/** A data-upgrade run (a holder of the upgrade lease, or one that held it). */
export const UPGRADE_RUN_STATES = ["running", "succeeded", "failed", "expired"] as const;

/** One attempt at one upgrade step. */
export const UPGRADE_STEP_STATES = ["running", "applied", "failed", "abandoned"] as const;

/** Where the data upgrade stands, as GET /v1/upgrades summarizes it. */
export const UPGRADE_STATUSES = ["current", "pending", "running", "failing"] as const;

/**
 * The `kind` of a FleetLock refusal: a fixed set, because Zincati turns it into a metric label.
 * (Their HTTP statuses are decided at the edge, src/fleetlock/protocol.ts.)
 */
export const FLEETLOCK_KINDS = [
  "missing_protocol_header",
  "invalid_client_params",
  "payload_too_large",
  "unauthorized",
  "unknown_client",
  "group_mismatch",
  "unknown_group",
  "semaphore_full",
  "group_paused",
  "outside_maintenance_window",
  // Health gates (src/fleetlock/gates.ts): a group that would grant but a gate holds it.
  "operator_hold",
  "fleet_unhealthy",
  "rollout_running",
  "reboots_unhealthy",
  "external_check_failed",
  // The fleet's disruption budget (src/fleetlock/budget.ts) is spent: the group would grant.
  "budget_exhausted",
  "not_found",
  "method_not_allowed",
  "internal_error",
] as const;
export type FleetLockKind = (typeof FLEETLOCK_KINDS)[number];

/** Fleet intent: whether the planner sets a server's agents, or an operator pinned them. */
export const PLAN_MODES = ["planned", "pinned"] as const;

/** The lifecycle orders a decommission issues (never `run`). */
export const LIFECYCLE_ORDERS = ["terminate", "uninstall"] as const;

/** Why `check server-agents` reports a finding, and what would fix it. */
export const DRIFT_REASONS = [
  "missing",
  "image_mismatch",
  "removal_pending",
  "removal_failed",
  "failed",
  "generation_behind",
  "stale_report",
] as const;
export type DriftReason = (typeof DRIFT_REASONS)[number];
export const DRIFT_FIXES = ["reissue", "refresh", "none"] as const;
export type DriftFix = (typeof DRIFT_FIXES)[number];

/** Coordinator work that follows a fleet's D1 change (src/fleets/tasks.ts); `apply_groups` carries a fleet spec's reboot groups. */
export const FLEET_TASK_KINDS = [
  "push_settings",
  "wipe",
  "apply_groups",
  "apply_webhooks",
  "stale_events",
  "apply_server_labels",
] as const;
export type FleetTaskKind = (typeof FLEET_TASK_KINDS)[number];

// ---- rollouts ----

/** A rollout's state (docs/design.md §4 "Rollouts"). */
export const ROLLOUT_STATES = [
  "running",
  "paused",
  "succeeded",
  "failed",
  "cancelled",
  "rolling_back",
  "rolled_back",
] as const;
export type RolloutState = (typeof ROLLOUT_STATES)[number];

/** One target's state in a rollout pass. */
/** `waiting_budget`: queued, and refused by the fleet's disruption budget; it starts when the budget frees. */
export const ROLLOUT_TARGET_STATES = [
  "queued",
  "waiting_budget",
  "applying",
  "done",
  "failed",
  "timed_out",
  "skipped",
] as const;
export type RolloutTargetState = (typeof ROLLOUT_TARGET_STATES)[number];

/** An operator's control of a rollout. */
export const ROLLOUT_CONTROLS = ["pause", "resume", "cancel", "rollback"] as const;
export type RolloutControl = (typeof ROLLOUT_CONTROLS)[number];

/** The builds the agent ships: Node's names for the platform and the architecture (uname -m x86_64 → x64, aarch64 → arm64). */
export const AGENT_OSES = ["linux"] as const;
export const AGENT_ARCHES = ["x64", "arm64"] as const;

/** The bodies a webhook can ask for (src/webhooks/formats.ts). */
export const WEBHOOK_FORMATS = ["cloudevents", "slack"] as const;
export type WebhookFormat = (typeof WEBHOOK_FORMATS)[number];
