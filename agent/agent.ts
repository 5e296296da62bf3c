import { contentKey } from "../src/domain/report-content.ts";
import { backoffDelay, type BackoffPolicy, DEFAULT_BACKOFF } from "./backoff.ts";
import { connectThroughFetch, connectWebSocket, type ChannelConnector } from "./channel.ts";
import { runChannelSession } from "./channel-session.ts";
import type { DesiredConfig } from "../src/model/server/schemas.ts";
import {
  PassMemory,
  reconcile,
  type AgentDriver,
  type Assignments,
  type ReconcileOutcome,
  type RestartPolicy,
} from "./driver.ts";
import type { AgentEvent, AgentExit, LoopState } from "./loop.ts";
import { HostApi, type DesiredAnswer, type Report, type ReportAccepted } from "./host-api.ts";
import { ApiError, type FetchLike, sleep as defaultSleep, wakeOn } from "./http.ts";
import { foreignConfig } from "./protocol.ts";

export interface HostAgentOptions {
  /** Harbormaster's base URL, e.g. https://harbormaster.example.com */
  url: string;
  /** This server's token (`hms.…`), from its registration. */
  token: string;
  driver: AgentDriver;
  /** This boot's id (`/proc/sys/kernel/random/boot_id` on Linux); a new one tells of a reboot. */
  bootId: string;
  /**
   * The server id this host joined as: a desired config naming another server is refused, never
   * run (a proxy that caches the desired config without regard to the token would hand every
   * host the first one's). Unset: not checked.
   */
  serverId?: string;
  /**
   * `channel` (the default): the host channel, a WebSocket the server pushes changes over,
   * falling back to the HTTP long poll while the upgrade is refused. `http`: the long poll only.
   */
  transport?: "channel" | "http";
  /** Opens the channel's socket (default: the runtime's WebSocket; in workerd, an upgrade through `fetch`). */
  connect?: ChannelConnector;
  /** Where the channel's upgrade carries the token: `header` (Authorization, the default) or `protocol`. */
  tokenIn?: "header" | "protocol";
  /** Keep-alive pings on the channel, ms (answered by the server without waking anything). */
  pingMs?: number;
  /** Delay before reconnecting the channel (full jitter): a fleet dropped at once comes back spread out. */
  reconnect?: BackoffPolicy;
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
  /** How soon an agent found down again is restarted (default: driver.ts's RESTART_BACKOFF). */
  restartBackoff?: RestartPolicy;
  fetch?: FetchLike;
  random?: () => number;
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  now?: () => number;
  onEvent?: (event: AgentEvent) => void;
}

export type { AgentEvent, AgentExit, LoopState } from "./loop.ts";

/** The reconnect delay of a dropped channel: up to 10 s at first, doubling to 5 min. */
const DEFAULT_RECONNECT: BackoffPolicy = { baseMs: 10_000, capMs: 300_000 };
/** A channel that stayed up this long starts its reconnect delays over. */
const STABLE_MS = 60_000;
/** How long a stopped loop waits for the pass under way before it returns anyway. */
const STOP_GRACE_MS = 20_000;
/** The longest a pass delays a report owed now (then a heartbeat goes, and the pass runs on). */
const PASS_GRACE_MS = 15_000;

/**
 * The loop a host runs: learn the desired config, reconcile through the driver, report the truth
 * (errors and boot_id included), and again at every heartbeat. By default over the host channel
 * (./channel-session.ts), where the server pushes changes; while the upgrade is refused, over the
 * HTTP long poll with its ETag. On errors it honours Retry-After, else backs off exponentially
 * with full jitter up to a cap. Lifecycle orders end the loop once reported: `terminate` after
 * its agents stop, `uninstall` after every agent is gone.
 */
export class HostAgent {
  readonly opts: HostAgentOptions;
  readonly api: HostApi;
  private readonly waitS: number;
  readonly reportIntervalMs: number;
  readonly now: () => number;
  readonly sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  readonly connect: ChannelConnector;
  /** What reconcile() keeps across passes: the agents it restarted, to back off from a crash loop. */
  private readonly memory: PassMemory;
  /** The pass under way (one at a time), or ended and not yet reported. */
  private pass: Pass | null = null;
  /** The machine's workload assignments, as last read. */
  private assignments: Assignments = { units: [], storage: [] };
  /** Whether `assignments` were ever read (a driver without any has none to read). */
  private assignmentsRead: boolean;

  constructor(opts: HostAgentOptions) {
    this.opts = opts;
    this.api = new HostApi(opts.url, opts.token, opts.fetch);
    this.waitS = Math.min(Math.max(opts.waitS ?? 60, 0), 60);
    this.reportIntervalMs = opts.reportIntervalMs ?? 60_000;
    this.now = opts.now ?? Date.now;
    this.sleep = opts.sleep ?? defaultSleep;
    this.memory = new PassMemory({ policy: opts.restartBackoff, now: this.now });
    this.assignmentsRead = !opts.driver.assignments;
    this.connect =
      opts.connect ??
      (typeof WebSocket === "function" && !("WebSocketPair" in globalThis)
        ? connectWebSocket
        : connectThroughFetch(opts.fetch));
  }

  emit(e: AgentEvent) {
    this.opts.onEvent?.(e);
  }

  async run(signal?: AbortSignal): Promise<AgentExit> {
    try {
      return await this.loop(signal);
    } finally {
      // A stop lets the pass under way finish its step for a while (systemd allows 30 s) rather
      // than leave the engine's command running with nobody to see it end.
      if (this.pass && !this.pass.outcome) {
        const bound = new AbortController();
        await Promise.race([this.pass.settled, defaultSleep(STOP_GRACE_MS, bound.signal).catch(() => {})]);
        bound.abort();
      }
    }
  }

  private async loop(signal?: AbortSignal): Promise<AgentExit> {
    const s: LoopState = {
      desired: null,
      etag: null,
      due: true,
      lastReportAt: -Infinity,
      lastPollAt: -Infinity,
      reportTag: null,
      reportedContent: null,
      lastReport: null,
      failures: 0,
    };
    let channelAt = this.opts.transport === "http" ? Infinity : this.now();
    let drops = 0;
    while (!signal?.aborted) {
      if (this.now() >= channelAt) {
        const openedAt = this.now();
        const session = await runChannelSession(this, s, signal);
        if (session.exit) return session.exit;
        if (signal?.aborted) break;
        drops = session.opened && this.now() - openedAt >= STABLE_MS ? 1 : drops + 1;
        const retryInMs = backoffDelay(drops, this.opts.reconnect ?? DEFAULT_RECONNECT, this.opts.random);
        this.emit({
          type: "channel",
          state: "closed",
          code: session.code ?? null,
          reason: session.reason ?? "",
          retryInMs,
        });
        channelAt = this.now() + retryInMs;
        // A channel that was open and dropped waits out its delay (a fleet dropped by a deploy must
        // not fall on the HTTP API at once); one that could not be opened polls over HTTP meanwhile.
        if (session.opened) {
          await this.sleep(retryInMs, signal).catch(() => {});
          continue;
        }
      }
      const exit = await this.httpStep(s, channelAt, signal);
      if (exit) return exit;
    }
    return { reason: "aborted" };
  }

  /**
   * One long poll (bounded by the heartbeat and the next channel attempt, and cut short when the
   * pass under way ends), then a report if one is due.
   */
  private async httpStep(s: LoopState, channelAt: number, signal?: AbortSignal): Promise<AgentExit | null> {
    try {
      // Taken before the poll's gap: a pass that ends meanwhile still cuts the poll short.
      const underWay = this.passUnderWay();
      const untilReport = s.lastReportAt + this.reportIntervalMs - this.now();
      const untilChannel = channelAt - this.now();
      const wait =
        s.due || !s.desired || this.pass?.outcome
          ? 0
          : Math.max(0, Math.min(this.waitS, Math.ceil(Math.min(untilReport, untilChannel) / 1000)));
      const minGap = this.opts.minPollIntervalMs ?? 1000;
      if (!s.due) {
        const gap = s.lastPollAt + minGap - this.now();
        if (gap > 0) await this.sleep(gap, signal);
      }
      const t0 = this.now();
      s.lastPollAt = t0;
      const wake = wakeOn(signal, underWay);
      let answer: DesiredAnswer | null = null;
      try {
        answer = await this.api.desired(s.etag, wait, wake.signal, s.reportTag);
      } catch (err) {
        // The pass ended: its report goes now, not when the poll would have.
        if (!wake.woken() || signal?.aborted) throw err;
      } finally {
        wake.done();
      }
      if (answer) {
        // Not said back (an older server, or a proxy that drops the header): the poll was no
        // heartbeat, so the next reconcile reports in full.
        if (s.reportTag !== null && !answer.heartbeat) s.reportTag = null;
        // Refused before it is logged: another server's generation is no news of this host's.
        const foreign = answer.changed ? foreignConfig(this.opts.serverId, answer.config) : null;
        if (foreign) throw foreign;
        this.emit({
          type: "desired",
          changed: answer.changed,
          generation: answer.changed ? answer.config.generation : (s.desired?.generation ?? null),
          ms: this.now() - t0,
        });
        if (answer.changed) {
          s.desired = answer.config;
          s.etag = answer.etag;
          s.due = true;
        }
      }
      // A heartbeat due within the next poll's minimum gap is sent now: one poll per period, not two.
      const exit = this.reportDue(s, minGap)
        ? await this.reconcileAndReport(s, (r) => this.api.report(r, signal), { pollCarriesHeartbeat: true, signal })
        : null;
      s.failures = 0;
      return exit;
    } catch (err) {
      if (signal?.aborted) return null;
      return this.failed(s, err, signal);
    }
  }

  /** Whether a reconcile and report is owed now (or within `withinMs`), or a pass ended unreported. */
  reportDue(s: LoopState, withinMs = 0) {
    return (
      s.desired !== null &&
      (s.due || this.pass?.outcome != null || this.now() - s.lastReportAt >= this.reportIntervalMs - withinMs)
    );
  }

  /** The pass under way, as a signal that fires when it ends; null when none runs (or its outcome waits to be reported). */
  passUnderWay(): AbortSignal | null {
    return this.pass && !this.pass.outcome ? this.pass.ended.signal : null;
  }

  /**
   * Starts a pass toward `desired` beside the loop: the engine's work (a download, a `load`, a
   * hook) takes what it takes, and the loop keeps its heartbeat meanwhile.
   */
  private startPass(desired: DesiredConfig, owed: boolean): Pass {
    const pass: Pass = {
      desired,
      owed,
      startedAt: this.now(),
      outcome: null,
      settled: Promise.resolve(),
      ended: new AbortController(),
    };
    const readAssignments = async () => {
      this.assignments = (await this.opts.driver.assignments?.()) ?? { units: [], storage: [] };
      this.assignmentsRead = true;
    };
    const run = async () => {
      // Read first too until read once: the heartbeat before the first report carries only
      // assignments read (they decide whether an uninstall is safe), and a first pass that installs
      // for minutes would otherwise have none to send. Its failure is the read below's to report.
      if (!this.assignmentsRead) await readAssignments().catch(() => {});
      let outcome = await reconcile(desired, this.opts.driver, this.memory);
      if (!outcome.unknown) {
        try {
          await readAssignments();
        } catch (err) {
          // Assignments that cannot be read are not reported as none (they block an uninstall):
          // the pass says it could not ask, with what it last knew.
          outcome = await reconcile(desired, failingDriver(err), this.memory);
        }
      }
      pass.outcome = { ...outcome, assignments: this.assignments };
    };
    pass.settled = run()
      .catch((err: unknown) => {
        // A driver's bug (reconcile() itself reports what fails): the call that reports it fails.
        pass.failure = err;
        pass.outcome = { errors: [], operations: 0, agents: [], unknown: true, assignments: this.assignments };
      })
      .finally(() => pass.ended.abort());
    return pass;
  }

  /**
   * Reconciles against the desired config and reports through `send`; ends the loop on a reported
   * lifecycle order. The pass runs beside the loop: this waits for it at most until the heartbeat
   * is due, and if it is still under way then, sends the heartbeat (what the host last reported,
   * or, before any report, what it sees, under an older generation, once it saw anything: the
   * server holds the host pending, and alive) and returns; the loops call again when the pass ends (passUnderWay()).
   * `pollCarriesHeartbeat` (HTTP): when nothing is owed and the report would say what the last
   * accepted one said, it is not sent: the next poll carries that report's tag.
   */
  async reconcileAndReport(
    s: LoopState,
    send: (report: Report) => Promise<ReportAccepted>,
    opts: { pollCarriesHeartbeat?: boolean; signal?: AbortSignal } = {},
  ): Promise<AgentExit | null> {
    if (!this.pass) {
      this.pass = this.startPass(s.desired!, s.due);
      s.due = false;
    }
    const pass = this.pass;
    // A pass gets a moment before a heartbeat goes instead of its report (most take milliseconds;
    // at the start there is no heartbeat to keep yet).
    const graceMs = Math.min(this.reportIntervalMs, PASS_GRACE_MS);
    const left = Math.max(s.lastReportAt + this.reportIntervalMs, pass.startedAt + graceMs) - this.now();
    if (!pass.outcome && left > 0) {
      const waiting = new AbortController();
      const stop = () => waiting.abort();
      opts.signal?.addEventListener("abort", stop, { once: true });
      // A real timer, not the retry sleep (opts.sleep) a caller may shorten: this is no backoff.
      await Promise.race([pass.settled, defaultSleep(left, waiting.signal).catch(() => {})]);
      waiting.abort();
      opts.signal?.removeEventListener("abort", stop);
    }
    if (!pass.outcome) {
      if (opts.signal?.aborted) return null;
      await this.heartbeat(s, pass, send, opts);
      return null;
    }
    this.pass = null;
    if (pass.failure !== undefined) {
      s.due = true;
      throw pass.failure;
    }
    if (pass.outcome.unknown && (!this.memory.answered || !this.assignmentsRead)) {
      // Nothing the machine ever said: a report would list no agents and no assignments (which
      // the server's decommission order reads to allow an uninstall), and the protocol has no
      // way to say "unknown" (its report is a strict object: a field of that meaning would be
      // refused by every server deployed before it). The report stays owed; the loop backs off
      // as from a failed call, and the server's staleness bound says the host is not heard.
      s.due = true;
      throw new Error(
        `nothing reported: the machine never said what it runs and carries (${pass.outcome.cause ?? "no answer"})`,
      );
    }
    try {
      return await this.reportPass(s, pass, pass.outcome, send, opts);
    } catch (err) {
      // Not reported: the next call reconciles and reports again.
      s.due = true;
      throw err;
    }
  }

  /** A pass's outcome, reported (what it found first, when it healed something). */
  private async reportPass(
    s: LoopState,
    pass: Pass,
    outcome: ReconcileOutcome & { assignments: Assignments },
    send: (report: Report) => Promise<ReportAccepted>,
    opts: { pollCarriesHeartbeat?: boolean },
  ): Promise<AgentExit | null> {
    const { desired } = pass;
    const { assignments } = outcome;
    this.emit({ type: "reconciled", generation: desired.generation, outcome });
    if (outcome.found) {
      // What the pass found before it restarted something: the server learns the agent stopped,
      // then (below) that it runs again.
      await send({
        generation: desired.generation,
        reconciled_at: new Date(this.now()).toISOString(),
        boot_id: this.opts.bootId,
        agents: outcome.found.agents,
        errors: outcome.found.errors,
        assignments,
      });
    }
    const report: Report = {
      // A pass that could not list the machine did not reach (or confirm) its generation: reported
      // under an older one (reachedGeneration), its errors kept (alive, its engine failing).
      generation: outcome.unknown ? reachedGeneration(s, desired) : desired.generation,
      reconciled_at: new Date(this.now()).toISOString(),
      boot_id: this.opts.bootId,
      agents: outcome.agents,
      errors: outcome.errors,
      assignments,
    };
    const content = contentKey(report);
    if (opts.pollCarriesHeartbeat && !pass.owed && s.reportTag !== null && content === s.reportedContent) {
      s.lastReportAt = this.now();
      this.emit({ type: "unchanged", generation: desired.generation, reportTag: s.reportTag });
      return null;
    }
    await this.sendReport(s, report, content, send);
    // Not on what was last seen: an order is done only when the machine says so. Nor on an order
    // superseded while its pass ran (a cancelled decommission): the next pass works toward the new one.
    if (outcome.unknown || s.desired?.generation !== desired.generation) return null;
    if (desired.lifecycle === "terminate" && outcome.agents.length === 0)
      return { reason: "terminated", generation: desired.generation };
    if (desired.lifecycle === "uninstall" && outcome.agents.length === 0)
      return { reason: "uninstalled", generation: desired.generation };
    return null;
  }

  /**
   * The heartbeat while a pass is under way: the last accepted report again (over HTTP, its tag on
   * the next poll), or, before any, the agents the pass saw at its first look under a generation
   * older than the one it works toward (the server holds the host pending, not stale), once the
   * machine answered a listing and the assignments were read.
   */
  private async heartbeat(
    s: LoopState,
    pass: Pass,
    send: (report: Report) => Promise<ReportAccepted>,
    opts: { pollCarriesHeartbeat?: boolean },
  ) {
    this.emit({ type: "reconciling", generation: pass.desired.generation });
    if (s.lastReport) {
      if (opts.pollCarriesHeartbeat && s.reportTag !== null) {
        s.lastReportAt = this.now();
        this.emit({ type: "unchanged", generation: s.lastReport.generation, reportTag: s.reportTag });
        return;
      }
      await this.sendReport(s, s.lastReport, s.reportedContent ?? contentKey(s.lastReport), send);
      return;
    }
    if (!this.memory.answered || !this.assignmentsRead) {
      // Nothing the machine said yet: an empty report would claim the host runs no agents (and
      // carries nothing an uninstall must wait for). Silence instead: the server's staleness bound
      // is minutes. The next try is a period on; the pass's end wakes the loop sooner.
      s.lastReportAt = this.now();
      return;
    }
    const report: Report = {
      generation: Math.max(0, pass.desired.generation - 1),
      reconciled_at: new Date(this.now()).toISOString(),
      boot_id: this.opts.bootId,
      agents: this.memory.known.map(({ name, image, version, instance_id, state }) => ({
        name,
        image,
        version,
        instance_id,
        state,
      })),
      errors: [],
      assignments: this.assignments,
    };
    await this.sendReport(s, report, contentKey(report), send);
  }

  private async sendReport(
    s: LoopState,
    report: Report,
    content: string,
    send: (report: Report) => Promise<ReportAccepted>,
  ) {
    const t1 = this.now();
    const accepted = await send(report);
    s.lastReportAt = this.now();
    s.reportTag = accepted.report_tag ?? null;
    s.reportedContent = content;
    s.lastReport = report;
    this.emit({ type: "reported", generation: report.generation, accepted, ms: s.lastReportAt - t1 });
  }

  /** After a failed call: a 401 ends the loop; otherwise wait (Retry-After, else jittered backoff). */
  async failed(s: LoopState, err: unknown, signal?: AbortSignal): Promise<AgentExit | null> {
    if (err instanceof ApiError && err.status === 401) return { reason: "unauthorized", message: err.message };
    // The server knows of no such generation (its ledger was restored, say): start over.
    if (err instanceof ApiError && err.code === "generation_not_issued") {
      s.etag = null;
      s.due = true;
    }
    // The server holds another report than the one the poll named: report in full, at once.
    if (err instanceof ApiError && err.code === "report_tag_unknown") {
      s.reportTag = null;
      s.due = true;
      this.emit({ type: "error", error: err, attempt: s.failures, delayMs: 0 });
      return null;
    }
    s.failures++;
    const delayMs =
      err instanceof ApiError && err.retryAfterMs !== null
        ? err.retryAfterMs
        : backoffDelay(s.failures, this.opts.backoff ?? DEFAULT_BACKOFF, this.opts.random);
    this.emit({ type: "error", error: err, attempt: s.failures, delayMs });
    await this.sleep(delayMs, signal).catch(() => {});
    return null;
  }
}

/**
 * The generation a pass that could not list the machine reports under: the one the host last
 * reconciled to (the last accepted report's), and always one before `desired`'s at most. A host
 * that already reported `desired` cannot say it still holds there: its agent not yet running
 * when the engine hung, the errors at that generation would settle its rollout target as failed
 * for good, on one timeout; under an older one the server holds it `pending`, and a hang that
 * lasts meets the rollout's own deadline.
 */
const reachedGeneration = (s: LoopState, desired: DesiredConfig) =>
  Math.max(0, Math.min(desired.generation - 1, s.lastReport?.generation ?? Infinity));

/** A pass: toward which config, whether a report was owed when it started, and how it ended. */
interface Pass {
  desired: DesiredConfig;
  owed: boolean;
  startedAt: number;
  /** What a pass that could not finish threw (its outcome is then a placeholder, never reported). */
  failure?: unknown;
  outcome: (ReconcileOutcome & { assignments: Assignments }) | null;
  settled: Promise<void>;
  /** Aborted when the pass ends: the loops' waits listen to it (and stop listening) per wait. */
  ended: AbortController;
}

/** A driver that cannot be asked anything: reconcile() then reports what it last saw, flagged with `err`. */
const failingDriver = (err: unknown): AgentDriver => {
  const fail = async (): Promise<never> => {
    throw err;
  };
  return { list: fail, install: fail, update: fail, remove: fail, start: fail, stop: fail };
};
