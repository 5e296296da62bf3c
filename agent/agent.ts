import type { DesiredConfig } from "../src/ledger/schemas.ts";
import { backoffDelay, type BackoffPolicy, DEFAULT_BACKOFF } from "./backoff.ts";
import { reconcile, type AgentDriver, type ReconcileOutcome } from "./driver.ts";
import { HostApi, type ReportAccepted } from "./host-api.ts";
import { ApiError, type FetchLike, sleep as defaultSleep } from "./http.ts";

export interface HostAgentOptions {
  /** Harbormaster's base URL, e.g. https://harbormaster.example.com */
  url: string;
  /** This server's token (`hms.…`), from its registration. */
  token: string;
  driver: AgentDriver;
  /** This boot's id (`/proc/sys/kernel/random/boot_id` on Linux); a new one tells of a reboot. */
  bootId: string;
  /** Longest long poll, seconds (the server allows 60). */
  waitS?: number;
  /** A report (and reconcile pass) at least this often, even with nothing new: the heartbeat. */
  reportIntervalMs?: number;
  /**
   * Polls never start closer together than this, so a server (or a proxy) that answers 304 at
   * once instead of parking the request does not turn the loop into a busy poll.
   */
  minPollIntervalMs?: number;
  backoff?: BackoffPolicy;
  fetch?: FetchLike;
  random?: () => number;
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  now?: () => number;
  onEvent?: (event: AgentEvent) => void;
}

export type AgentEvent =
  | { type: "desired"; changed: boolean; generation: number | null; ms: number }
  | { type: "reconciled"; generation: number; outcome: ReconcileOutcome }
  | { type: "reported"; generation: number; accepted: ReportAccepted; ms: number }
  | { type: "error"; error: unknown; attempt: number; delayMs: number };

export type AgentExit =
  | { reason: "aborted" }
  | { reason: "terminated"; generation: number }
  | { reason: "uninstalled"; generation: number }
  /** The server's token no longer works (revoked, or the server was removed). */
  | { reason: "unauthorized"; message: string };

/**
 * The loop a host runs: long-poll the desired config with its ETag, reconcile through the
 * driver, report the truth (errors and boot_id included), and again at every heartbeat. On
 * errors it honours Retry-After, else backs off exponentially with full jitter up to a cap.
 * Lifecycle orders end the loop once reported: `terminate` after its agents stop, `uninstall`
 * after every agent is gone.
 */
export class HostAgent {
  private readonly opts: HostAgentOptions;
  private readonly api: HostApi;
  private readonly waitS: number;
  private readonly reportIntervalMs: number;
  private readonly now: () => number;
  private readonly sleep: (ms: number, signal?: AbortSignal) => Promise<void>;

  constructor(opts: HostAgentOptions) {
    this.opts = opts;
    this.api = new HostApi(opts.url, opts.token, opts.fetch);
    this.waitS = Math.min(Math.max(opts.waitS ?? 55, 0), 60);
    this.reportIntervalMs = opts.reportIntervalMs ?? 60_000;
    this.now = opts.now ?? Date.now;
    this.sleep = opts.sleep ?? defaultSleep;
  }

  async run(signal?: AbortSignal): Promise<AgentExit> {
    let etag: string | null = null;
    let desired: DesiredConfig | null = null;
    let due = true; // a reconcile and report is owed (start, new config, heartbeat)
    let lastReportAt = -Infinity;
    let lastPollAt = -Infinity;
    let failures = 0;
    const emit = (e: AgentEvent) => this.opts.onEvent?.(e);

    while (!signal?.aborted) {
      try {
        // Park on the long poll until the next heartbeat is due, never longer than waitS.
        const untilReport = lastReportAt + this.reportIntervalMs - this.now();
        const wait = due || !desired ? 0 : Math.max(0, Math.min(this.waitS, Math.floor(untilReport / 1000)));
        if (!due) {
          const gap = lastPollAt + (this.opts.minPollIntervalMs ?? 1000) - this.now();
          if (gap > 0) await this.sleep(gap, signal);
        }
        const t0 = this.now();
        lastPollAt = t0;
        const answer = await this.api.desired(etag, wait, signal);
        emit({ type: "desired", changed: answer.changed, generation: answer.changed ? answer.config.generation : desired?.generation ?? null, ms: this.now() - t0 });
        if (answer.changed) {
          desired = answer.config;
          etag = answer.etag;
          due = true;
        }
        if (desired && (due || this.now() - lastReportAt >= this.reportIntervalMs)) {
          const outcome = await reconcile(desired, this.opts.driver);
          emit({ type: "reconciled", generation: desired.generation, outcome });
          const assignments = (await this.opts.driver.assignments?.()) ?? { units: [], storage: [] };
          const t1 = this.now();
          const accepted = await this.api.report(
            {
              generation: desired.generation,
              reconciled_at: new Date(this.now()).toISOString(),
              boot_id: this.opts.bootId,
              agents: outcome.agents,
              errors: outcome.errors,
              assignments,
            },
            signal,
          );
          lastReportAt = this.now();
          due = false;
          emit({ type: "reported", generation: desired.generation, accepted, ms: lastReportAt - t1 });
          if (desired.lifecycle === "terminate" && outcome.agents.length === 0) {
            return { reason: "terminated", generation: desired.generation };
          }
          if (desired.lifecycle === "uninstall" && outcome.agents.length === 0) {
            return { reason: "uninstalled", generation: desired.generation };
          }
        }
        failures = 0;
      } catch (err) {
        if (signal?.aborted) break;
        if (err instanceof ApiError && err.status === 401) return { reason: "unauthorized", message: err.message };
        // The server knows of no such generation (its ledger was restored, say): start over.
        if (err instanceof ApiError && err.code === "generation_not_issued") {
          etag = null;
          due = true;
        }
        failures++;
        const delayMs =
          err instanceof ApiError && err.retryAfterMs !== null
            ? err.retryAfterMs
            : backoffDelay(failures, this.opts.backoff ?? DEFAULT_BACKOFF, this.opts.random);
        emit({ type: "error", error: err, attempt: failures, delayMs });
        try {
          await this.sleep(delayMs, signal);
        } catch {
          break;
        }
      }
    }
    return { reason: "aborted" };
  }
}
