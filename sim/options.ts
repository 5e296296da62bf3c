// What a simulator run is told: the fleet, its size and faults, how hosts talk, and the defaults.
import type { FetchLike } from "../agent/http.ts";
import type { Progress, SetupProgress } from "./model.ts";

export interface SimOptions {
  url: string;
  token: string;
  fleet: string;
  servers: number;
  durationS: number;
  /** Agents in each server's desired config. */
  agents: number;
  /** Fraction of hosts on which installing one agent always fails. */
  installFailRate: number;
  /** Fraction of hosts on which removing an agent always fails. */
  removeFailRate: number;
  /** Fraction of hosts whose operations are slow. */
  slowRate: number;
  /** Median time of one driver operation, ms (log-normal), on normal and on slow hosts. */
  latencyMs: number;
  slowLatencyMs: number;
  /**
   * Silences and reboots fall within this many seconds from the start (default: the run's
   * duration); a caller that lets the run go on past its measurement says where faults stop.
   */
  faultsWithinS?: number;
  /** Fraction of hosts that stop talking at some point of the run. */
  silentRate: number;
  /** Fraction of hosts that take a reboot slot and reboot once during the run. */
  rebootRate: number;
  /** Fraction of reboots whose steady-state call is lost. */
  lostSteadyRate: number;
  /** Slots of the simulator's reboot group. */
  slots: number;
  group: string;
  /** When the operator issues a second generation (one agent removed, one updated); null: never. */
  changeAtS: number | null;
  /** Hosts start spread over this many seconds (a fleet does not boot in one instant). */
  rampS: number;
  /** How hosts learn of changes: the host channel (the agent's default) or the HTTP long poll only. */
  transport: "channel" | "http";
  /** Host long-poll wait (HTTP) and heartbeat (both), seconds. */
  waitS: number;
  heartbeatS: number;
  seed: number;
  /** Where the servers' tokens are kept between runs, so a later run reuses its servers. */
  stateFile: string | null;
  /** Requests in flight while setting up (registration, desired configs). */
  setupConcurrency: number;
  /**
   * Give each server its first desired config in the task that registers it, while its ledger is
   * still awake, rather than in a pass after every registration (which wakes each ledger again).
   * The first generation's convergence then counts from that earlier write.
   */
  orderAtRegistration?: boolean;
  fetch?: FetchLike;
  onProgress?: (p: Progress) => void;
  /** Called during the setup (at most every `progressEveryMs`, and once at its end). */
  onSetup?: (p: SetupProgress) => void;
  progressEveryMs?: number;
  signal?: AbortSignal;
}

export const DEFAULTS: Omit<SimOptions, "url" | "token" | "fleet"> = {
  servers: 10,
  durationS: 30,
  agents: 3,
  installFailRate: 0,
  removeFailRate: 0,
  slowRate: 0,
  latencyMs: 5,
  slowLatencyMs: 800,
  silentRate: 0,
  rebootRate: 0,
  lostSteadyRate: 0,
  slots: 1,
  group: "sim",
  changeAtS: null,
  rampS: 1,
  transport: "channel",
  waitS: 25,
  heartbeatS: 20,
  seed: 1,
  stateFile: null,
  setupConcurrency: 16,
};
