/**
 * Reboots for plain hosts (Debian, Ubuntu, RHEL), coordinated as Zincati does on Fedora CoreOS:
 * when a reboot is needed (the `reboot.required_file` exists, or `reboot.check_command` exits 0),
 * the agent asks the fleet's FleetLock group for a slot under its server's `fleetlock_id`, runs
 * `reboot.command` once granted, and after the boot (a new boot_id) reports, then calls
 * steady-state once the server answers a report with `realized`. A refused slot is asked for again
 * every `reboot.check_interval_s`.
 *
 * reboot.json keeps where it is, so a crash anywhere converges: written `requested` before the
 * pre-reboot (a lost answer is asked again: the lock is recursive), `granted` before the command
 * (a command that failed, or a crash before it, runs again after another pre-reboot); found with
 * another boot_id than this boot's, the reboot happened: steady-state once healthy, then removed.
 */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import type { FleetLockResult } from "../fleetlock.ts";
import type { ReportAccepted } from "../host-api.ts";
import type { AgentConfig } from "./config.ts";
import type { Logger } from "./log.ts";
import { UnreadableStateFile, type StateDir } from "./state.ts";

export interface RebootState {
  phase: "requested" | "granted";
  /** The boot that asked: another boot_id at start means the machine rebooted since. */
  boot_id: string;
  since: string;
}

interface FleetLock {
  preReboot(signal?: AbortSignal): Promise<FleetLockResult>;
  steadyState(signal?: AbortSignal): Promise<FleetLockResult>;
}

export interface RebootOptions {
  state: StateDir;
  config: AgentConfig["reboot"];
  bootId: string;
  /** Null when no FleetLock URL is configured: reboots are then never taken on. */
  fleetlock: FleetLock | null;
  log: Logger;
  /** Runs a command, resolving to its exit status (tests and the CLI pass the real spawn). */
  runCommand?: (argv: string[], signal?: AbortSignal) => Promise<{ code: number | null; output: string }>;
}

function spawnCommand(argv: string[], signal?: AbortSignal): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    let output = "";
    const child = spawn(argv[0], argv.slice(1), { stdio: ["ignore", "pipe", "pipe"], signal });
    const keep = (d: Buffer) => (output = (output + d.toString()).slice(-2000));
    child.stdout.on("data", keep);
    child.stderr.on("data", keep);
    child.on("error", (err) => resolve({ code: null, output: err.message }));
    child.on("close", (code) => resolve({ code, output: output.trim() }));
  });
}

export class RebootCoordinator {
  private readonly o: RebootOptions;
  private readonly runCommand: NonNullable<RebootOptions["runCommand"]>;
  /** The machine rebooted for a slot: steady-state once a report is answered `realized`. */
  private awaitingHealthy = false;
  private warnedNoFleetLock = false;
  private busy = false;

  constructor(o: RebootOptions) {
    this.o = o;
    this.runCommand = o.runCommand ?? spawnCommand;
    let st: RebootState | null;
    try {
      st = o.state.read<RebootState>("reboot.json");
    } catch (err) {
      if (!(err instanceof UnreadableStateFile)) throw err;
      // A slot this host may hold must not stay taken: releasing one it does not hold is harmless
      // (FleetLock's steady-state), and the release removes the file.
      o.log.error(`reboot: ${err.message}; releasing any slot this host holds once a report is healthy`);
      this.awaitingHealthy = true;
      return;
    }
    if (st && st.boot_id !== o.bootId) {
      this.awaitingHealthy = true;
      o.log.info("reboot: this is a new boot; the slot is released once a report is healthy", { asked_at: st.since });
    }
  }

  /** Whether a steady-state call is owed (for `status`). */
  get pending(): boolean {
    return this.awaitingHealthy;
  }

  private async needed(signal?: AbortSignal): Promise<boolean> {
    if (existsSync(this.o.config.required_file)) return true;
    if (this.o.config.check_command) return (await this.runCommand(this.o.config.check_command, signal)).code === 0;
    return false;
  }

  /** One look: take a slot and reboot if a reboot is needed (or one granted has not happened yet). */
  async tick(signal?: AbortSignal): Promise<void> {
    if (this.awaitingHealthy || this.busy) return;
    this.busy = true;
    try {
      const st = this.o.state.read<RebootState>("reboot.json");
      if (!st && !(await this.needed(signal))) return;
      const fleetlock = this.o.fleetlock;
      if (!fleetlock) {
        if (!this.warnedNoFleetLock)
          this.o.log.warn("reboot: needed, but no reboot.fleetlock_url is configured; not rebooting");
        this.warnedNoFleetLock = true;
        return;
      }
      this.o.state.write("reboot.json", {
        phase: "requested",
        boot_id: this.o.bootId,
        since: st?.since ?? new Date().toISOString(),
      } satisfies RebootState);
      const r = await fleetlock.preReboot(signal);
      if (!r.ok) {
        this.o.log.info("reboot: slot refused; asking again later", {
          kind: r.kind,
          value: r.value,
          retry_s: this.o.config.check_interval_s,
        });
        return;
      }
      this.o.state.write("reboot.json", {
        phase: "granted",
        boot_id: this.o.bootId,
        since: st?.since ?? new Date().toISOString(),
      } satisfies RebootState);
      this.o.log.info("reboot: slot granted; rebooting", { command: this.o.config.command.join(" ") });
      const ran = await this.runCommand(this.o.config.command, signal);
      if (ran.code !== 0)
        this.o.log.error("reboot: the reboot command failed; trying again later", {
          code: ran.code,
          output: ran.output,
        });
    } catch (err) {
      this.o.log.warn("reboot: FleetLock call failed; trying again later", { error: (err as Error).message });
    } finally {
      this.busy = false;
    }
  }

  /** After each accepted report: the first healthy one after the reboot gives the slot back. */
  async onReported(accepted: ReportAccepted, signal?: AbortSignal): Promise<void> {
    if (!this.awaitingHealthy || this.busy) return;
    if (accepted.status !== "realized") return;
    if (!this.o.fleetlock) {
      this.o.state.remove("reboot.json");
      this.awaitingHealthy = false;
      return;
    }
    this.busy = true;
    try {
      const r = await this.o.fleetlock.steadyState(signal);
      if (!r.ok) {
        this.o.log.warn("reboot: steady-state refused; trying again after the next report", {
          kind: r.kind,
          value: r.value,
        });
        return;
      }
      this.o.state.remove("reboot.json");
      this.awaitingHealthy = false;
      this.o.log.info("reboot: healthy after the reboot; slot released");
    } catch (err) {
      this.o.log.warn("reboot: steady-state failed; trying again after the next report", {
        error: (err as Error).message,
      });
    } finally {
      this.busy = false;
    }
  }
}
