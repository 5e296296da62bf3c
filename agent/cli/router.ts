/**
 * The host's driver: the agent itself (`harbormaster-agent`) goes to its self-update driver
 * (./self-update.ts), every other agent to the machine's drivers (agent/drivers/: podman or
 * tarball by the image's kind). `list()` is the self entry (while the desired config names it)
 * and what the machine's drivers find.
 */
import type { AgentSpec, DesiredConfig } from "../../src/model/server/schemas.ts";
import type { AgentDriver, Assignments, ListedAgent, ReportedAgent } from "../driver.ts";
import { AGENT_NAME } from "./version.ts";

export class WithSelf implements AgentDriver {
  private readonly self: AgentDriver;
  private readonly machine: AgentDriver;

  constructor(self: AgentDriver, machine: AgentDriver) {
    this.self = self;
    this.machine = machine;
  }

  private of(name: string) {
    return name === AGENT_NAME ? this.self : this.machine;
  }

  async beforePass(desired: DesiredConfig) {
    await this.self.beforePass?.(desired);
    await this.machine.beforePass?.(desired);
  }

  async list(): Promise<ListedAgent[]> {
    const mine = await this.self.list();
    // A container or tarball named harbormaster-agent cannot be told from the agent itself: the agent wins.
    return [...mine, ...(await this.machine.list()).filter((a) => a.name !== AGENT_NAME)];
  }

  install(spec: AgentSpec) {
    return this.of(spec.name).install(spec);
  }

  update(current: ReportedAgent, spec: AgentSpec) {
    return this.of(spec.name).update(current, spec);
  }

  remove(current: ReportedAgent) {
    return this.of(current.name).remove(current);
  }

  start(current: ReportedAgent) {
    return this.of(current.name).start(current);
  }

  stop(current: ReportedAgent) {
    return this.of(current.name).stop(current);
  }

  async assignments(): Promise<Assignments> {
    return (await this.machine.assignments?.()) ?? { units: [], storage: [] };
  }
}
