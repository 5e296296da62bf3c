/**
 * The host's driver: each desired agent goes to the driver of its image's kind (`oci-archive`
 * and `oci-ref` to the container engine, `tarball` to the tarball driver; a free-form image
 * string with no kind is a container image reference), and the agent itself (`harbormaster-agent`)
 * to its self-update driver. `list()` is the union of what each driver finds on the machine.
 */
import type { AgentSpec, DesiredConfig } from "../../src/ledger/schemas.ts";
import type { AgentDriver, Assignments, ReportedAgent } from "../driver.ts";
import { AGENT_NAME } from "./version.ts";

export type ImageKind = "oci-archive" | "oci-ref" | "tarball";

/** A driver this host cannot offer, and why (podman missing, say): installs of its kind fail with that. */
export type Offered = { driver: AgentDriver } | { driver: null; why: string };

export interface RouterDrivers {
  container: Offered;
  tarball: Offered;
  /** The agent's own entry (./self-update.ts). */
  self: AgentDriver;
}

export function kindOf(spec: AgentSpec): ImageKind {
  const kind = (spec as AgentSpec & { kind?: string }).kind;
  return kind === "tarball" || kind === "oci-archive" ? kind : "oci-ref";
}

export class KindRouter implements AgentDriver {
  private readonly drivers: RouterDrivers;
  /** Which driver listed each agent in the last `list()`: its later operations go there. */
  private owner = new Map<string, AgentDriver>();

  constructor(drivers: RouterDrivers) {
    this.drivers = drivers;
  }

  private offered(): AgentDriver[] {
    const out: AgentDriver[] = [this.drivers.self];
    for (const o of [this.drivers.container, this.drivers.tarball]) if (o.driver) out.push(o.driver);
    return out;
  }

  async beforePass(desired: DesiredConfig) {
    for (const d of this.offered()) await d.beforePass?.(desired);
  }

  async list(): Promise<ReportedAgent[]> {
    const owner = new Map<string, AgentDriver>();
    const out: ReportedAgent[] = [];
    for (const d of this.offered()) {
      for (const a of await d.list()) {
        // One name, one agent: the first driver that has it owns it (the self driver first).
        if (owner.has(a.name)) continue;
        owner.set(a.name, d);
        out.push(a);
      }
    }
    this.owner = owner;
    return out;
  }

  /** The driver for a desired agent; throws (a report error) when this host has none for its kind. */
  driverFor(spec: AgentSpec): AgentDriver {
    if (spec.name === AGENT_NAME) return this.drivers.self;
    const kind = kindOf(spec);
    const offered = kind === "tarball" ? this.drivers.tarball : this.drivers.container;
    if (!offered.driver) throw new Error(`this host cannot run ${kind} images: ${offered.why}`);
    return offered.driver;
  }

  private ownerOf(current: ReportedAgent): AgentDriver {
    const d = this.owner.get(current.name);
    if (!d) throw new Error(`${current.name} was not listed by any driver`);
    return d;
  }

  install(spec: AgentSpec) {
    return this.driverFor(spec).install(spec);
  }

  async update(current: ReportedAgent, spec: AgentSpec) {
    const from = this.ownerOf(current);
    const to = this.driverFor(spec);
    if (from === to) return to.update(current, spec);
    // Another kind (a container agent shipped as a tarball now): the new one is installed
    // first, so a failed install leaves the old one running; the old one goes once it is up.
    await to.install(spec);
    await from.remove(current);
  }

  remove(current: ReportedAgent) {
    return this.ownerOf(current).remove(current);
  }

  start(current: ReportedAgent) {
    return this.ownerOf(current).start(current);
  }

  stop(current: ReportedAgent) {
    return this.ownerOf(current).stop(current);
  }

  async assignments(): Promise<Assignments> {
    const units: string[] = [];
    const storage: string[] = [];
    for (const d of this.offered()) {
      const a = await d.assignments?.();
      if (a) {
        units.push(...a.units);
        storage.push(...a.storage);
      }
    }
    return { units, storage };
  }
}
