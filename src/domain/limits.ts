/**
 * Every size and count limit the API enforces, defined once; the zod schemas (and so the OpenAPI
 * document) and the hand-written checks read them from here. Pure, like ./enums.
 */

/** Request bodies under /v1. */
export const MAX_BODY_BYTES = 1024 * 1024;
/** FleetLock bodies: `{"client_params":{"id","group"}}` is a few dozen bytes. */
export const MAX_FLEETLOCK_BODY_BYTES = 16 * 1024;

/** A FleetLock client id (Zincati sends its node id), i.e. a server's `fleetlock_id`. */
export const MAX_FLEETLOCK_ID_LENGTH = 256;
/** Reboot group names, as the FleetLock protocol's `^[a-zA-Z0-9.-]+$`, bounded. */
export const MAX_GROUP_NAME_LENGTH = 63;

/** Agents in one desired config or one report; errors in one report. */
export const MAX_AGENTS = 500;
export const MAX_REPORT_ERRORS = 500;
/** Workload units or storage attachments in one report, and the length of each id. */
export const MAX_ASSIGNMENTS = 10_000;
export const MAX_ASSIGNMENT_ID_LENGTH = 256;

/** Slots of one reboot group, and a fleet's default for unconfigured groups. */
export const MAX_GROUP_SLOTS = 10_000;

/** Long-poll ceiling for GET /v1/agent/desired?wait=S. */
export const MAX_WAIT_S = 60;

/** Page sizes and opaque cursors. */
export const MAX_PAGE_SIZE = 500;
export const DEFAULT_PAGE_SIZE = 100;
export const MAX_CURSOR_LENGTH = 1024;

/** Capabilities of one fleet; agents of one role profile; roles of one server. */
export const MAX_CAPABILITIES = 256;
export const MAX_ROLE_AGENTS = 100;
export const MAX_SERVER_ROLES = 64;

/** A forced decommission's reason. */
export const MAX_REASON_LENGTH = 1000;

/**
 * Longest a FleetLock pre-reboot may wait in its group's queue (`queue_wait_s`): just under the
 * clients' own request time-outs, so a host waits in the queue for as long as it would wait at all.
 * Zincati gives a request 30 minutes (coreos/zincati src/fleet_lock/mod.rs,
 * DEFAULT_HTTP_COMPLETION_TIMEOUT, set with reqwest's ClientBuilder::timeout) and Flatcar's
 * fleetlockctl none at all (flatcar/fleetlock cmd/lock.go, http.DefaultClient); 29 minutes leaves
 * Zincati a minute for connecting and for the answer. A wait that long keeps a wave's freed slots
 * busy (docs/benchmarks.md, reboot wave); proxies in between may need a shorter one.
 */
export const MAX_QUEUE_WAIT_S = 1740;

/** A group's `unclaimed_grant_s`: how long a grant its host could not be told of is kept for it. */
export const MIN_UNCLAIMED_GRANT_S = 5;
export const MAX_UNCLAIMED_GRANT_S = 3600;

/** Hosts parked in one group's queue at once; beyond it a pre-reboot is refused as before. */
export const MAX_QUEUED_PER_GROUP = 10_000;

// ---- fleet specs ----

/**
 * Items of one fleet spec, per section: an apply is one D1 batch (two statements per channel or
 * role at most), which these keep well inside D1's statements per invocation.
 */
export const MAX_SPEC_CHANNELS = 200;
export const MAX_SPEC_ROLES = 200;
export const MAX_SPEC_GROUPS = 100;
/**
 * Hostnames a fleet spec's `servers` section may name: like the other sections, bounded so an
 * apply stays one D1 batch well inside D1's statements per invocation, and so the fleet task that
 * hands the labels to the servers' ledgers (one call per hostname) finishes in one invocation.
 */
export const MAX_SPEC_SERVERS = 200;

// ---- rollouts ----

/** Targets applying at once in one rollout: default and ceiling. */
export const DEFAULT_ROLLOUT_CONCURRENCY = 20;
export const MAX_ROLLOUT_CONCURRENCY = 1000;
/** Long-poll ceiling for GET /v1/rollouts/{id}?wait=S. */
export const MAX_ROLLOUT_WAIT_S = 60;
/** Per-server timeout ceiling (a week) and the slow-server factor's ceiling. */
export const MAX_SERVER_TIMEOUT_S = 7 * 86400;
/**
 * A target with no realizing report within this many seconds times out when the rollout names no
 * `server_timeout_s`: a dead host must not hold its rollout, nor the (fleet, agent), for ever.
 */
export const DEFAULT_SERVER_TIMEOUT_S = 3600;
/** After a cancel, targets still applying are waited for at most this long, then time out. */
export const CANCEL_GRACE_S = 120;
export const MAX_SLOW_FACTOR = 1000;
/** Servers a selector or an exclude list may name. */
export const MAX_ROLLOUT_SERVER_LIST = 100_000;

// ---- server labels ----

/**
 * Labels of one server (`{"zone": "eu-1a"}`). Few and short: they travel in every index row and
 * every list answer, and each is a row of the label index (`server_labels`).
 */
export const MAX_SERVER_LABELS = 16;
/** A label key, as Kubernetes' label names: lowercase, digits, `.`, `_`, `/`, `-`. */
export const MAX_LABEL_KEY_LENGTH = 63;
/** A label value, as Kubernetes' label values. */
export const MAX_LABEL_VALUE_LENGTH = 63;
/** `label=` terms one list query may AND together. */
export const MAX_LABEL_FILTERS = 16;

/** More mappings than this is a directory copied in, not a mapping: every sign-in reads them all. */
export const MAX_SSO_MAPPINGS = 500;
