import { describe, expect, it } from "vitest";
import { HostAgent, type LoopState } from "../agent.ts";
import type { Report, ReportAccepted } from "../host-api.ts";
import { reconcile, type ListedAgent } from "../driver.ts";
import { MemoryDriver } from "../memory-driver.ts";

/** A MemoryDriver that counts list() calls and can say an agent is failed, and why. */
class Probe extends MemoryDriver {
  lists = 0;
  sick = new Map<string, string>();
  override async list(): Promise<ListedAgent[]> {
    this.lists++;
    return (await super.list()).map((a) =>
      this.sick.has(a.name) ? { ...a, state: "failed" as const, reason: this.sick.get(a.name) } : a,
    );
  }
}

const desired = (agents: { name: string; version: string }[]) => ({
  server_id: "s",
  generation: 1,
  lifecycle: "run" as const,
  agents: agents.map((a) => ({ ...a, image: a.name, instance_id: `i-${a.name}` })),
});

describe("reconcile with drivers that list for real", () => {
  it("asks the machine once in a pass that changes nothing, twice when it acted", async () => {
    const d = new Probe();
    await reconcile(desired([{ name: "a", version: "1" }]), d);
    expect(d.lists).toBe(2);
    d.lists = 0;
    const idle = await reconcile(desired([{ name: "a", version: "1" }]), d);
    expect(d.lists).toBe(1);
    expect(idle.agents).toEqual([{ name: "a", image: "a", version: "1", instance_id: "i-a", state: "running" }]);
  });

  it("reports a failed agent's reason as its error, and only the protocol's fields as the agent", async () => {
    const d = new Probe();
    await reconcile(desired([{ name: "a", version: "1" }]), d);
    d.sick.set("a", "container hm-a is unhealthy: disk full");
    const out = await reconcile(desired([{ name: "a", version: "1" }]), d);
    expect(out.agents).toEqual([{ name: "a", image: "a", version: "1", instance_id: "i-a", state: "failed" }]);
    expect(out.errors).toEqual([{ agent: "a", op: "start", message: "container hm-a is unhealthy: disk full" }]);
  });
});

describe("an agent found stopped", () => {
  it("is restarted, and the pass keeps what it found so the report can say so first", async () => {
    const d = new Probe();
    await reconcile(desired([{ name: "a", version: "1" }]), d);
    d.installed.get("a")!.state = "stopped";
    const out = await reconcile(desired([{ name: "a", version: "1" }]), d);
    expect(out.found?.agents).toEqual([{ name: "a", image: "a", version: "1", instance_id: "i-a", state: "stopped" }]);
    expect(out.agents[0].state).toBe("running");
    const idle = await reconcile(desired([{ name: "a", version: "1" }]), d);
    expect(idle.found).toBeUndefined();
  });
});

describe("an agent that keeps stopping", () => {
  it("is restarted each pass, and a second restart in a row is an error until a pass finds it running", async () => {
    const d = new Probe();
    const restarts = new Map<string, number>();
    const want = desired([{ name: "a", version: "1" }]);
    await reconcile(want, d, restarts);
    const crash = () => {
      d.installed.get("a")!.state = "failed";
      d.sick.set("a", "container hm-a exited with code 3");
    };
    // A restart heals it (for a while).
    d.start = async (c) => {
      d.sick.delete(c.name);
      await MemoryDriver.prototype.start.call(d, c);
    };
    const pass = () => reconcile(want, d, restarts);
    crash();
    // Once is a crash: restarted, reported running (after the found report), no error.
    expect((await pass()).errors).toEqual([]);
    crash();
    const loop = await pass();
    expect(loop.agents.map((a) => a.state)).toEqual(["running"]);
    expect(loop.errors).toEqual([
      {
        agent: "a",
        op: "start",
        message: "stopped again after its restart (2 passes in a row): container hm-a exited with code 3",
      },
    ]);
    // A pass that finds it still running ends the loop's count.
    expect((await pass()).errors).toEqual([]);
    crash();
    expect((await pass()).errors).toEqual([]);
  });
});

describe("a host agent that heals a stopped agent", () => {
  it("reports the agent stopped, then running", async () => {
    const d = new Probe();
    const agent = new HostAgent({ url: "http://127.0.0.1:1", token: "hms.x.y", driver: d, bootId: "b" });
    const s = { desired: desired([{ name: "a", version: "1" }]), due: true } as unknown as LoopState;
    const sent: Report[] = [];
    const send = async (r: Report) => (sent.push(r), { report_tag: null } as unknown as ReportAccepted);
    await agent.reconcileAndReport(s, send);
    d.installed.get("a")!.state = "stopped";
    await agent.reconcileAndReport(s, send);
    expect(sent.map((r) => r.agents.map((a) => a.state))).toEqual([["running"], ["stopped"], ["running"]]);
  });
});
