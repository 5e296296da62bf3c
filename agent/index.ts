/** The reference host agent: the loop, its driver interface, a FleetLock client, retry timing. */
export { HostAgent, type AgentEvent, type AgentExit, type HostAgentOptions } from "./agent.ts";
export { backoffDelay, retryAfterMs, DEFAULT_BACKOFF, type BackoffPolicy } from "./backoff.ts";
export {
  reconcile,
  PassMemory,
  RESTART_BACKOFF,
  type RestartPolicy,
  type AgentDriver,
  type ListedAgent,
  type ReconcileOutcome,
  type ReportedAgent,
  type ReportError,
} from "./driver.ts";
export { FleetLockClient, type FleetLockResult } from "./fleetlock.ts";
export { HostApi, type ReportAccepted, type DesiredAnswer } from "./host-api.ts";
export { ApiError, sleep, type FetchLike } from "./http.ts";
export { MemoryDriver, type MemoryDriverOptions } from "./memory-driver.ts";
