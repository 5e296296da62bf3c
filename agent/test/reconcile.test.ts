import { describe, expect, it } from "vitest";
import { PassMemory, reconcile, type ListedAgent } from "../driver.ts";
import { MemoryDriver } from "../memory-driver.ts";
import { handDriven } from "./helpers.ts";

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
  const policy = { baseMs: 30_000, capMs: 120_000, stableMs: 600_000 };
  const crashLoop = () => {
    const d = new Probe();
    let now = 1_000_000;
    const memory = new PassMemory({ policy, now: () => now });
    const want = desired([{ name: "a", version: "1" }]);
    const crash = () => {
      d.installed.get("a")!.state = "failed";
      d.sick.set("a", "container hm-a exited with code 3");
    };
    const starts: number[] = [];
    // A restart heals it (for a while).
    d.start = async (c) => {
      starts.push(now);
      d.sick.delete(c.name);
      await MemoryDriver.prototype.start.call(d, c);
    };
    return {
      d,
      crash,
      starts,
      pass: () => reconcile(want, d, memory),
      at: (t: number) => (now = 1_000_000 + t),
    };
  };

  it("is restarted at once the first time, then after delays that double up to a cap, and says so", async () => {
    const { d, crash, starts, pass, at } = crashLoop();
    await pass();
    // Once is a crash: restarted at once, reported running (after the found report), no error.
    at(0);
    crash();
    expect((await pass()).errors).toEqual([]);
    // Down again 1 s later: not restarted before 30 s have passed since the last restart.
    at(1_000);
    crash();
    const waiting = await pass();
    expect(waiting.agents.map((a) => a.state)).toEqual(["failed"]);
    expect(waiting.errors).toEqual([
      {
        agent: "a",
        op: "start",
        message: "down again after 1 restart; the next in 29 s: container hm-a exited with code 3",
      },
    ]);
    expect(waiting.found).toBeUndefined();
    at(29_000);
    await pass();
    expect(starts).toEqual([1_000_000]);
    // Due: restarted, and the crash loop said even though it runs now.
    at(30_000);
    const second = await pass();
    expect(second.agents.map((a) => a.state)).toEqual(["running"]);
    expect(second.errors).toEqual([
      {
        agent: "a",
        op: "start",
        message:
          "stopped again after its restart (restart 2; the next not before 60 s): container hm-a exited with code 3",
      },
    ]);
    // Then 60 s, then 120 s, then the cap (120 s) again.
    for (const [t, ok] of [
      [31_000, false],
      [89_000, false],
      [90_000, true],
      [209_000, false],
      [210_000, true],
      [329_000, false],
      [330_000, true],
    ] as const) {
      at(t);
      crash();
      await pass();
      expect(d.installed.get("a")!.state === "running", `at ${t} ms`).toBe(ok);
    }
    expect(starts.map((t) => t - 1_000_000)).toEqual([0, 30_000, 90_000, 210_000, 330_000]);
  });

  it("starts over once it stayed up for the stable period: its next crash is healed at once, without an error", async () => {
    const { crash, starts, pass, at } = crashLoop();
    await pass();
    at(0);
    crash();
    await pass();
    at(30_000);
    crash();
    await pass();
    // Up and seen running, but not yet stable: a crash now still waits its turn.
    at(40_000);
    expect((await pass()).errors).toEqual([]);
    at(41_000);
    crash();
    expect((await pass()).errors[0].message).toMatch(/^down again after 2 restarts; the next in 49 s/);
    at(90_000);
    await pass();
    // Up for 10 min since its last restart, seen running: stable.
    at(690_000);
    expect((await pass()).errors).toEqual([]);
    at(691_000);
    crash();
    const healed = await pass();
    expect(healed.errors).toEqual([]);
    expect(healed.agents.map((a) => a.state)).toEqual(["running"]);
    expect(starts.map((t) => t - 1_000_000)).toEqual([0, 30_000, 90_000, 691_000]);
  });
});

describe("an agent restarted late in a long pass", () => {
  it("counts its restart from when it was restarted, not from when the pass began", async () => {
    const d = new Probe();
    let now = 1_000_000;
    const memory = new PassMemory({ policy: { baseMs: 30_000, capMs: 120_000, stableMs: 600_000 }, now: () => now });
    const want = desired([
      { name: "big", version: "1" },
      { name: "a", version: "1" },
    ]);
    await reconcile(want, d, memory);
    // The pass first restarts another agent, which takes 11 minutes (a slow engine, a long settle).
    d.start = async (c) => {
      if (c.name === "big") now += 660_000;
      await MemoryDriver.prototype.start.call(d, c);
    };
    const crash = (name: string) => (d.installed.get(name)!.state = "failed");
    crash("big");
    crash("a");
    await reconcile(want, d, memory);
    expect(d.installed.get("a")!.state).toBe("running");
    // Seen running a second after its restart: not yet stable, so down again it waits its turn.
    now += 1_000;
    expect((await reconcile(want, d, memory)).errors).toEqual([]);
    now += 1_000;
    crash("a");
    const again = await reconcile(want, d, memory);
    expect(again.errors.map((e) => e.message)).toEqual([
      expect.stringMatching(/^down again after 1 restart; the next in 28 s/),
    ]);
    expect(d.installed.get("a")!.state).toBe("failed");
  });
});

describe("an agent updated out of a crash loop", () => {
  it("has its new version's first crash healed at once", async () => {
    const d = new Probe();
    let now = 1_000_000;
    const memory = new PassMemory({ policy: { baseMs: 30_000, capMs: 600_000, stableMs: 600_000 }, now: () => now });
    const crash = () => (d.installed.get("a")!.state = "failed");
    const v1 = desired([{ name: "a", version: "1" }]);
    await reconcile(v1, d, memory);
    // Version 1 crash-loops: three restarts, the next one 2 minutes off.
    for (const t of [0, 30_000, 90_000]) {
      now = 1_000_000 + t;
      crash();
      await reconcile(v1, d, memory);
    }
    // The operator ships version 2; it runs, then crashes once.
    now += 1_000;
    const v2 = desired([{ name: "a", version: "2" }]);
    await reconcile(v2, d, memory);
    now += 1_000;
    crash();
    const out = await reconcile(v2, d, memory);
    expect(out.errors).toEqual([]);
    expect(d.installed.get("a")!.state).toBe("running");
  });
});

describe("a host agent that heals a stopped agent", () => {
  it("reports the agent stopped, then running", async () => {
    const d = new Probe();
    const { sent, pass } = handDriven(d, desired([{ name: "a", version: "1" }]));
    await pass();
    d.installed.get("a")!.state = "stopped";
    await pass();
    expect(sent.map((r) => r.agents.map((a) => a.state))).toEqual([["running"], ["stopped"], ["running"]]);
  });
});

describe("a host agent whose machine cannot be asked what it runs", () => {
  it("reports, but does not take a terminate order as done on what it last saw", async () => {
    const d = new Probe();
    const { s, sent, pass } = handDriven(d, desired([]));
    await pass();
    // The machine answered once (it runs nothing); then it stops answering as a terminate comes.
    d.list = async () => {
      throw new Error("podman ps timed out after 60 s (killed)");
    };
    s.desired = { ...desired([]), generation: 2, lifecycle: "terminate" };
    s.due = true;
    expect(await pass()).toBeNull();
    expect(sent.map((r) => r.agents)).toEqual([[], []]);
  });

  it("reports nothing before it answered once: a report would say the host runs and carries nothing", async () => {
    const d = new Probe();
    d.list = async () => {
      throw new Error("podman ps timed out after 60 s (killed)");
    };
    const { s, sent, pass } = handDriven(d, { ...desired([]), lifecycle: "uninstall" });
    await expect(pass()).rejects.toThrow(/nothing reported: the machine never said what it runs/);
    expect(sent).toEqual([]);
    expect(s.due).toBe(true);
  });
});

describe("a pass whose install waits on an outsider (a registry, a blob server)", () => {
  it("restarts the agents found down and removes the unwanted ones first: they do not wait behind it", async () => {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    class Stuck extends MemoryDriver {
      override async install(spec: Parameters<MemoryDriver["install"]>[0]) {
        if (spec.name === "a") await held;
        await super.install(spec);
      }
    }
    const d = new Stuck();
    await reconcile(
      desired([
        { name: "b", version: "1" },
        { name: "c", version: "1" },
      ]),
      d,
    );
    d.installed.get("b")!.state = "stopped";
    // "a" sorts first, as the server orders agents: its install comes before b's restart in the list.
    const pass = reconcile(
      desired([
        { name: "a", version: "1" },
        { name: "b", version: "1" },
      ]),
      d,
    );
    const deadline = Date.now() + 2_000;
    while ((d.installed.get("b")?.state !== "running" || d.installed.has("c")) && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 10));
    const during = { b: d.installed.get("b")?.state, c: d.installed.has("c") };
    release();
    const out = await pass;
    expect(during).toEqual({ b: "running", c: false });
    expect(out.agents.map((a) => [a.name, a.state]).sort()).toEqual([
      ["a", "running"],
      ["b", "running"],
    ]);
    expect(out.errors).toEqual([]);
  });
});
