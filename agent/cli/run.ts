/**
 * `harbormaster-agent run`: the loop (agent/agent.ts) on this machine, with the drivers of
 * ./router.ts, the reboot coordination of ./reboot.ts and the self-update of ./self-update.ts;
 * what it does goes to the log (one line per event) and to status.json (for `status`).
 *
 * Exit statuses (the systemd unit relies on them): 0 stopped by a signal or a lifecycle order
 * done (stays down); 75 a new build of the agent is in place (start again); 78 not joined, a
 * configuration it cannot use, or a token the server refuses (no restart: a restart would not
 * help, and everything on the machine stays as it is).
 */
import { isSea } from "node:sea";
import { HostAgent, type AgentEvent, type AgentExit } from "../agent.ts";
import { wsConnector } from "../channel-ws.ts";
import type { AgentDriver } from "../driver.ts";
import { FleetLockClient } from "../fleetlock.ts";
import type { ReportAccepted } from "../host-api.ts";
import { ApiError, sleep } from "../http.ts";
import type { AgentConfig } from "./config.ts";
import { readId } from "./join.ts";
import type { Logger } from "./log.ts";
import { RebootCoordinator } from "./reboot.ts";
import { WithSelf } from "./router.ts";
import { endRun, startRun } from "./crash-backoff.ts";
import { holdStateDir } from "./single-run.ts";
import { checkSwapOnStart, EXIT_RESTART, SelfDriver, sweepSelfUpdateLeftovers } from "./self-update.ts";
import { UnreadableStateFile, type Identity, type StateDir, type StatusFile } from "./state.ts";
import { AGENT_VERSION } from "./version.ts";

const EXIT_OK = 0;
/** Another run holds the state directory: a failure, which systemd restarts (it runs once the other is gone). */
const EXIT_HELD = 1;
export const EXIT_CONFIG = 78;

/** The machine's drivers (./drivers.ts makes the real ones: podman and tarballs, by the image's kind). */
export type DriverFactory = (config: AgentConfig, identity: Identity, state: StateDir, log: Logger) => AgentDriver;

export interface RunOptions {
  config: AgentConfig;
  /** The configuration file given on the command line, handed to a trial run of a new build. */
  configFile: string | null;
  state: StateDir;
  log: Logger;
  drivers: DriverFactory;
  /** A trial of a new build (./self-update.ts): exit 0 on the first accepted report. */
  trial?: boolean;
  signal?: AbortSignal;
}

const messageOf = (err: unknown) => (err instanceof Error ? err.message : String(err));

export async function runAgent(o: RunOptions): Promise<number> {
  const { config, state, log } = o;
  let identity: Identity | null;
  try {
    identity = state.identity();
  } catch (err) {
    if (!(err instanceof UnreadableStateFile)) throw err;
    // Not restarted (78): a restart would read the same file; guessing a server would be worse.
    log.error(`${err.message}: restore it from a backup, or remove it and join again`);
    return EXIT_CONFIG;
  }
  if (!identity) {
    log.error(`not joined: run \`harbormaster-agent join URL TOKEN\` first (state directory ${state.dir})`);
    return EXIT_CONFIG;
  }
  let bootId: string;
  try {
    bootId = readId(config.boot_id_file, "boot id");
  } catch (err) {
    log.error(messageOf(err));
    return EXIT_CONFIG;
  }
  // Before anything here reads or writes the directory (the sweep, the crash count, the swap).
  // A trial is its parent's own question: it runs while the parent, which holds the directory,
  // waits for its answer.
  let hold: Awaited<ReturnType<typeof holdStateDir>> | null = null;
  try {
    hold = o.trial ? null : await holdStateDir(state.dir);
  } catch (err) {
    // Its key could not be made (a full disk, a read-only directory): a failure systemd retries.
    log.error(`the state directory ${state.dir} could not be held: ${messageOf(err)}`);
    return EXIT_HELD;
  }
  if (hold && !hold.held) {
    log.error(
      `another harbormaster-agent run${hold.holder !== null ? ` (pid ${hold.holder})` : ""} holds the state directory ${state.dir}; stopping, and leaving everything to it`,
    );
    return EXIT_HELD;
  }
  try {
    return await runHolding(o, identity, bootId);
  } finally {
    await hold?.release();
  }
}

async function runHolding(o: RunOptions, identity: Identity, bootId: string): Promise<number> {
  const { config, state, log } = o;
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  o.signal?.addEventListener("abort", onSignal, { once: true });
  let restart = false;

  // A build swapped in by a self-update must prove itself (see ./self-update.ts).
  const swap = o.trial ? ({ kind: "none" } as const) : checkSwapOnStart(state, log);
  // The rollback is the cure for a new build's crash loop: the build put back starts at once.
  if (swap.kind === "rolled_back") {
    endRun(state, log);
    return EXIT_RESTART;
  }

  const binary = config.self_update.binary ?? (isSea() ? process.execPath : null);
  if (!o.trial) {
    // A kill -9 (a crash, a power cut) between two steps leaves temporaries nothing else removes.
    try {
      const swept = [...state.sweepTemporaries(), ...sweepSelfUpdateLeftovers(binary)];
      if (swept.length > 0) log.info("removed what an interrupted run left", { files: swept.join(", ") });
    } catch (err) {
      log.warn(`leftovers of an interrupted run could not be removed: ${messageOf(err)}`);
    }
  }
  const status: StatusFile = {
    pid: process.pid,
    version: AGENT_VERSION,
    started_at: new Date().toISOString(),
    transport: config.transport,
    connected: false,
    desired_generation: null,
    last_report: null,
    last_error: null,
    exited: null,
    crash_backoff: null,
  };
  const saveStatus = () => {
    if (o.trial) return;
    try {
      state.write("status.json", status, { durable: false });
    } catch (err) {
      log.warn(`status.json could not be written: ${messageOf(err)}`);
    }
  };

  if (!o.trial) {
    const { crashes, delayMs } = startRun(state, bootId, config.crash_backoff, log);
    if (delayMs > 0) {
      log.warn("the last run crashed; waiting before connecting", {
        crashes_in_a_row: crashes,
        wait_s: Math.round(delayMs / 100) / 10,
      });
      // Written before the wait, or `status` would show the crashed run's pid as gone meanwhile.
      status.crash_backoff = { until: new Date(Date.now() + delayMs).toISOString(), crashes };
      saveStatus();
      await sleep(delayMs, stop.signal).catch(() => {});
      status.crash_backoff = null;
      if (stop.signal.aborted) {
        o.signal?.removeEventListener("abort", onSignal);
        endRun(state, log);
        status.exited = { at: new Date().toISOString(), reason: "aborted" };
        saveStatus();
        log.info("stopped");
        return EXIT_OK;
      }
    }
  }
  saveStatus();
  // From here, every return is a run that ended as it should (a crash leaves run.json behind).
  const ended = (code: number) => {
    if (!o.trial) endRun(state, log);
    return code;
  };
  const self = new SelfDriver({
    state,
    identity,
    binary,
    trialArgs: o.configFile ? ["--config", o.configFile] : [],
    startTimeoutS: config.self_update.start_timeout_s,
    log,
    onRestart: () => {
      restart = true;
      stop.abort();
    },
  });
  let machine: AgentDriver;
  try {
    machine = o.drivers(config, identity, state, log);
  } catch (err) {
    log.error(`drivers could not be set up: ${messageOf(err)}`);
    o.signal?.removeEventListener("abort", onSignal);
    status.exited = { at: new Date().toISOString(), reason: `drivers could not be set up: ${messageOf(err)}` };
    saveStatus();
    return ended(EXIT_CONFIG);
  }
  const driver: AgentDriver = new WithSelf(self, machine);

  const fleetlockUrl = config.reboot.fleetlock_url;
  const reboots = o.trial
    ? null
    : new RebootCoordinator({
        state,
        config: config.reboot,
        bootId,
        log,
        fleetlock: fleetlockUrl
          ? new FleetLockClient(fleetlockUrl.endsWith("/") ? fleetlockUrl : `${fleetlockUrl}/`, {
              id: identity.fleetlock_id ?? identity.machine_id,
              group: identity.reboot_group,
            })
          : null,
      });

  // A trial is its parent's question: with the parent killed (the unit's KillMode=process leaves
  // children alone), nobody waits for its answer, and it would reconcile beside the restarted agent.
  let orphanWatch: ReturnType<typeof setInterval> | null = null;
  if (o.trial) {
    // Named by the parent (a parent killed before this line ran would otherwise go unnoticed).
    const parent = Number(process.env.HARBORMASTER_AGENT_TRIAL_PARENT) || process.ppid;
    orphanWatch = setInterval(() => {
      if (process.ppid === parent) return;
      log.warn("the agent that started this trial is gone; stopping the trial");
      // At once, not after the pass under way: the restarted agent (5 s later, or at once for a
      // `systemctl restart`) would reconcile beside it for as long as that pass waits on its
      // engine (a minute, a load ten). A trial keeps nothing of its own (no status, no crash
      // count, no reboot), and a kill between any two steps is one the agent recovers from.
      process.exit(EXIT_HELD);
    }, 500);
  }

  let trialTimer: ReturnType<typeof setTimeout> | null = null;
  let trialPassed = false;
  if (o.trial || swap.kind === "trial") {
    trialTimer = setTimeout(() => {
      log.error(`no report accepted within ${config.self_update.start_timeout_s} s of starting this build`);
      if (swap.kind === "trial") {
        swap.rollback(`did not report within ${config.self_update.start_timeout_s} s of its start`);
        restart = true;
      }
      stop.abort();
    }, config.self_update.start_timeout_s * 1000);
  }

  const onReported = (accepted: ReportAccepted) => {
    if (trialTimer && !trialPassed) {
      trialPassed = true;
      clearTimeout(trialTimer);
      if (swap.kind === "trial") swap.confirm();
      if (o.trial) stop.abort();
    }
    void reboots?.onReported(accepted, stop.signal);
  };

  const onEvent = (e: AgentEvent) => {
    switch (e.type) {
      case "channel":
        if (e.state === "open") {
          log.info("channel open", { url: identity.url });
          status.connected = true;
        } else {
          log.warn("channel closed", {
            code: e.code,
            reason: e.reason || undefined,
            retry_in_s: Math.round(e.retryInMs / 1000),
          });
          status.connected = false;
        }
        saveStatus();
        break;
      case "pushed":
      case "desired":
        if (e.type === "desired") {
          if (config.transport === "http" || !status.connected) status.connected = true;
          if (!e.changed) break;
        }
        log.info("desired config", {
          generation: e.generation,
          via: e.type === "pushed" ? `channel ${e.message}` : "http",
        });
        status.desired_generation = e.generation;
        saveStatus();
        break;
      case "reconciled":
        for (const err of e.outcome.errors) log.warn(`${err.agent}: ${err.op} failed`, { error: err.message });
        if (e.outcome.operations > 0)
          log.info("reconciled", {
            generation: e.generation,
            operations: e.outcome.operations,
            errors: e.outcome.errors.length,
          });
        status.last_report = {
          at: status.last_report?.at ?? "",
          generation: e.generation,
          status: status.last_report?.status ?? "unknown",
          agents: e.outcome.agents.map((a) => ({ name: a.name, version: a.version, state: a.state })),
          errors: e.outcome.errors.length,
        };
        break;
      case "reported": {
        const changed = status.last_report?.status !== e.accepted.status;
        if (changed) log.info("reported", { generation: e.generation, status: e.accepted.status, ms: e.ms });
        else log.debug("reported", { generation: e.generation, status: e.accepted.status, ms: e.ms });
        status.last_report = {
          ...(status.last_report ?? { agents: [], errors: 0, generation: e.generation }),
          at: new Date().toISOString(),
          status: e.accepted.status,
        };
        status.last_error = null;
        saveStatus();
        onReported(e.accepted);
        break;
      }
      case "reconciling":
        log.info("a pass is still under way (the engine is slow); the heartbeat goes meanwhile", {
          generation: e.generation,
        });
        break;
      case "unchanged":
        log.debug("unchanged; the next poll carries the report's tag", { generation: e.generation });
        break;
      case "error": {
        const message = messageOf(e.error);
        log.warn("call failed", { error: message, attempt: e.attempt, retry_in_s: Math.round(e.delayMs / 1000) });
        if (config.transport === "http" && !(e.error instanceof ApiError)) status.connected = false;
        status.last_error = { at: new Date().toISOString(), message };
        saveStatus();
        break;
      }
    }
  };

  const agent = new HostAgent({
    url: identity.url,
    token: identity.token,
    serverId: identity.server_id,
    driver,
    bootId,
    transport: config.transport,
    // A channel message over the protocol's largest is refused from its frame header (./channel-ws.ts).
    connect: wsConnector(),
    reportIntervalMs: config.report_interval_s * 1000,
    onEvent,
  });

  log.info(o.trial ? "trial run of this build" : "starting", {
    version: AGENT_VERSION,
    server: identity.server_id,
    hostname: identity.hostname,
    fleet: identity.fleet,
    transport: config.transport,
  });

  const rebootLoop = (async () => {
    if (!reboots) return;
    while (!stop.signal.aborted) {
      await reboots.tick(stop.signal);
      await sleep(config.reboot.check_interval_s * 1000, stop.signal).catch(() => {});
    }
  })();

  let exit: AgentExit;
  try {
    exit = await agent.run(stop.signal);
  } finally {
    stop.abort();
    if (trialTimer) clearTimeout(trialTimer);
    if (orphanWatch) clearInterval(orphanWatch);
    o.signal?.removeEventListener("abort", onSignal);
    await rebootLoop;
  }
  status.connected = false;
  status.exited = { at: new Date().toISOString(), reason: restart ? "restarting into another build" : exit.reason };
  saveStatus();

  return ended(exitCode(exit, restart, trialPassed, o, log));
}

function exitCode(exit: AgentExit, restart: boolean, trialPassed: boolean, o: RunOptions, log: Logger): number {
  if (o.trial) return trialPassed ? EXIT_OK : 1;
  if (restart) return EXIT_RESTART;
  switch (exit.reason) {
    case "unauthorized":
      log.error("the server refused this host's token; stopping, and leaving every agent and its data as they are", {
        error: exit.message,
      });
      return EXIT_CONFIG;
    case "terminated":
      log.info("terminated: every agent is stopped, its data kept", { generation: exit.generation });
      return EXIT_OK;
    case "uninstalled":
      log.info("uninstalled: every agent is removed", { generation: exit.generation });
      return EXIT_OK;
    default:
      log.info("stopped");
      return EXIT_OK;
  }
}
