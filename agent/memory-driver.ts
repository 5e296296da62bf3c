import type { AgentSpec } from "../src/model/server/schemas.ts";
import type { AgentDriver, Assignments, ReportedAgent } from "./driver.ts";
import { sleep } from "./http.ts";

export interface MemoryDriverOptions {
  /** Whether an install (or update) of this agent fails. */
  failInstall?: (name: string) => boolean;
  /** Whether removing this agent fails. */
  failRemove?: (name: string) => boolean;
  /** Time each operation takes, ms (a slow host returns more). */
  latencyMs?: () => number;
  assignments?: Assignments;
}

/**
 * A driver whose machine is a Map: for tests and the fleet simulator. Failures and latency are
 * injected; everything else behaves like a real host (instance ids kept across updates, removals
 * really remove, a failed install leaves nothing behind).
 */
export class MemoryDriver implements AgentDriver {
  readonly installed = new Map<string, ReportedAgent>();
  operations = 0;
  private readonly opts: MemoryDriverOptions;

  constructor(opts: MemoryDriverOptions = {}) {
    this.opts = opts;
  }

  private async work() {
    this.operations++;
    const ms = this.opts.latencyMs?.() ?? 0;
    if (ms > 0) await sleep(ms);
  }

  async list() {
    return [...this.installed.values()].map((a) => ({ ...a }));
  }

  async install(spec: AgentSpec) {
    await this.work();
    if (this.opts.failInstall?.(spec.name)) throw new Error(`pull of ${spec.image} failed (injected)`);
    this.installed.set(spec.name, {
      name: spec.name,
      image: spec.image,
      version: spec.version,
      instance_id: spec.instance_id,
      state: "running",
    });
  }

  async update(current: ReportedAgent, spec: AgentSpec) {
    await this.work();
    if (this.opts.failInstall?.(spec.name)) throw new Error(`pull of ${spec.image} failed (injected)`);
    this.installed.set(spec.name, { ...current, image: spec.image, version: spec.version, state: "running" });
  }

  async remove(current: ReportedAgent) {
    await this.work();
    if (this.opts.failRemove?.(current.name)) throw new Error(`removal of ${current.name} failed (injected)`);
    this.installed.delete(current.name);
  }

  async start(current: ReportedAgent) {
    await this.work();
    const a = this.installed.get(current.name);
    if (a) a.state = "running";
  }

  async stop(current: ReportedAgent) {
    await this.work();
    const a = this.installed.get(current.name);
    if (a) a.state = "stopped";
  }

  async assignments() {
    return this.opts.assignments ?? { units: [], storage: [] };
  }
}
