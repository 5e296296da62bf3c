import { describe, expect, it } from "vitest";
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
