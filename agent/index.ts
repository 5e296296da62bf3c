/** The reference host agent: the loop, its driver interface, a FleetLock client, retry timing. */
export { HostAgent, type AgentEvent, type AgentExit, type HostAgentOptions } from "./agent";
export { backoffDelay, retryAfterMs, DEFAULT_BACKOFF, type BackoffPolicy } from "./backoff";
export { reconcile, type AgentDriver, type ReconcileOutcome, type ReportedAgent, type ReportError } from "./driver";
export { FleetLockClient, type FleetLockResult } from "./fleetlock";
export { HostApi, type ReportAccepted, type DesiredAnswer } from "./host-api";
export { ApiError, sleep, type FetchLike } from "./http";
export { MemoryDriver, type MemoryDriverOptions } from "./memory-driver";
