/**
 * A pass whose engine work takes long (a 10-minute `load`, a slow hook) runs beside the loop: the
 * heartbeat keeps its period meanwhile, over the channel and over HTTP, and the pass's own report
 * goes as soon as it ends, not at the next heartbeat.
 */
import { getEventListeners } from "node:events";
import { afterEach, describe, expect, it } from "vitest";
import { CHANNEL_VERSION } from "../../src/domain/channel.ts";
import { HostAgent, type AgentExit } from "../agent.ts";
import type { ChannelConnector, ChannelSocket } from "../channel.ts";
import type { AgentSpec } from "../../src/model/server/schemas.ts";
import type { ReportedAgent } from "../driver.ts";
import type { Report } from "../host-api.ts";
import { wakeOn, type FetchLike } from "../http.ts";
import { MemoryDriver } from "../memory-driver.ts";

const config = {
  server_id: "srv-1",
  generation: 1,
  lifecycle: "run",
  agents: [{ name: "exporter", image: "exporter", version: "1", instance_id: "i-1" }],
};

/** Installs and stops that take until the test lets them finish. */
class SlowInstall extends MemoryDriver {
  private release!: () => void;
  private readonly gate = new Promise<void>((r) => (this.release = r));
  finish() {
    this.release();
  }
  override async install(spec: AgentSpec) {
    await this.gate;
    await super.install(spec);
  }
  override async stop(current: ReportedAgent) {
    await this.gate;
    await super.stop(current);
  }
}

const accepted = (r: Report) => ({
  server_id: "srv-1",
  desired_generation: 1,
  status: r.generation === 1 ? "realized" : "pending",
  agents: [],
  report_tag: `t-${r.generation}-${r.agents.length}`,
});

/** What the server heard from the host, and when (ms since the start). */
type Heard = {
  at: number;
  what: "report" | "poll-heartbeat";
  generation: number | null;
  agents?: number;
  errors?: number;
  units?: number;
};

/** A scripted control plane over HTTP: the config once, then long polls that answer 304 after their wait. */
function httpServer(t0: number) {
  const heard: Heard[] = [];
  let served = false;
  let lastTag: string | null = null;
  const fetch: FetchLike = async (input, init) => {
    const url = new URL(String(input));
    const headers = new Headers(init?.headers);
    if (url.pathname === "/v1/agent/inventory") {
      const report = JSON.parse(String(init!.body)) as Report;
      heard.push({ at: Date.now() - t0, what: "report", generation: report.generation });
      const body = accepted(report);
      lastTag = body.report_tag;
      return new Response(JSON.stringify(body), { status: 200 });
    }
    const tag = headers.get("X-Report-Tag");
    if (tag !== null && tag === lastTag) heard.push({ at: Date.now() - t0, what: "poll-heartbeat", generation: null });
    if (!served) {
      served = true;
      return new Response(JSON.stringify(config), { status: 200, headers: { ETag: '"1"' } });
    }
    const waitS = Number(url.searchParams.get("wait") ?? 0);
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(resolve, waitS * 1000);
      init?.signal?.addEventListener("abort", () => {
        clearTimeout(timer);
        reject(init.signal!.reason);
      });
    });
    return new Response(null, { status: 304, headers: { ETag: '"1"', ...(tag ? { "X-Report-Tag": tag } : {}) } });
  };
  return { fetch, heard };
}

/**
 * A scripted control plane over the channel: `first` (the config) on connect, an ack for every
 * report; `push` sends the open socket another message.
 */
function channelServer(t0: number, first: object = { type: "desired", v: CHANNEL_VERSION, config }) {
  const heard: Heard[] = [];
  let push: (message: object) => void = () => {};
  const connect: ChannelConnector = async () => {
    const listeners: Record<string, ((e: unknown) => void)[]> = { message: [], close: [], error: [] };
    const deliver = (data: string) => setTimeout(() => listeners.message.forEach((l) => l({ data })), 0);
    push = (message) => deliver(JSON.stringify(message));
    const socket = {
      send(data: string) {
        if (data === "ping") return deliver("pong");
        const m = JSON.parse(data);
        if (m.type !== "report") return;
        heard.push({
          at: Date.now() - t0,
          what: "report",
          generation: m.report.generation,
          agents: m.report.agents.length,
          errors: m.report.errors.length,
          units: m.report.assignments.units.length,
        });
        deliver(JSON.stringify({ type: "ack", v: CHANNEL_VERSION, id: m.id, status: 200, body: accepted(m.report) }));
      },
      close(code = 1000, reason = "") {
        setTimeout(() => listeners.close.forEach((l) => l({ code, reason })), 0);
      },
      addEventListener(type: string, l: (e: unknown) => void) {
        listeners[type].push(l);
      },
    } as ChannelSocket;
    push(first);
    return socket;
  };
  return { connect, heard, push: (message: object) => push(message) };
}

let stop: (() => Promise<unknown>) | null = null;
afterEach(async () => {
  await stop?.();
  stop = null;
});

const until = async (what: string, pred: () => boolean, ms = 10_000) => {
  const deadline = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
};

/** An agent whose one agent's install hangs until `driver.finish()`, on a 1 s heartbeat; stopped after the test. */
function slowAgent(opts: Partial<ConstructorParameters<typeof HostAgent>[0]>, driver = new SlowInstall()) {
  const controller = new AbortController();
  const agent = new HostAgent({
    url: "http://127.0.0.1:1",
    token: "hms.test",
    driver,
    bootId: "boot-a",
    reportIntervalMs: 1_000,
    ...opts,
  });
  const exit: Promise<AgentExit> = agent.run(controller.signal);
  stop = () => (driver.finish(), controller.abort(), exit);
  return { driver, exit, controller };
}

describe("a pass slowed by its engine work", () => {
  it.each(["channel", "http"] as const)(
    "does not hold the heartbeat, and is reported as soon as it ends (%s)",
    async (transport) => {
      const t0 = Date.now();
      const server = transport === "http" ? httpServer(t0) : channelServer(t0);
      const { driver } = slowAgent({
        transport,
        minPollIntervalMs: 100,
        random: () => 0,
        ...("fetch" in server ? { fetch: server.fetch } : { connect: server.connect }),
      });

      // The install hangs for over 3.5 s, and ends just after a heartbeat; their period is 1 s.
      await new Promise((r) => setTimeout(r, 3_500));
      const seen = server.heard.length;
      await until("a heartbeat", () => server.heard.length > seen);
      const during = [...server.heard];
      driver.finish();
      const released = Date.now() - t0;
      await until("the pass's report", () => server.heard.some((h) => h.generation === 1));

      // Heard from every period while the install ran (a report, or a poll carrying its tag),
      // never the pass's report, and nothing before the first report said to be current.
      expect(during.length).toBeGreaterThanOrEqual(3);
      const gaps = during.map((h, i) => h.at - (i === 0 ? 0 : during[i - 1].at));
      expect(Math.max(...gaps)).toBeLessThan(1_800);
      expect(during.filter((h) => h.what === "report").map((h) => h.generation)).toEqual(expect.arrayContaining([0]));
      expect(during.some((h) => h.generation === 1)).toBe(false);
      // Its report went when it ended, not a heartbeat period later.
      const done = server.heard.find((h) => h.generation === 1)!;
      expect(done.at - released).toBeLessThan(400);
      expect([...driver.installed.keys()]).toEqual(["exporter"]);
    },
  );
});

describe("a loop stopped while a pass is under way", () => {
  it("lets the pass end its step before it returns", async () => {
    const server = channelServer(Date.now());
    let returned = false;
    const { driver, exit, controller } = slowAgent({ connect: server.connect });
    void exit.finally(() => (returned = true));
    await until("a heartbeat", () => server.heard.length > 0);
    controller.abort();
    await new Promise((r) => setTimeout(r, 500));
    expect(returned).toBe(false);
    driver.finish();
    await expect(exit).resolves.toEqual({ reason: "aborted" });
    expect([...driver.installed.keys()]).toEqual(["exporter"]);
  });
});

describe("an order superseded while its pass is under way", () => {
  it("does not end the loop on the old order's outcome", async () => {
    // The terminate order's pass is still stopping the agent when the operator cancels it (the
    // next generation runs the agent again).
    const spec = config.agents[0];
    const driver = new SlowInstall();
    driver.installed.set(spec.name, { ...spec, state: "running" });
    const terminate = { ...config, generation: 2, lifecycle: "terminate", agents: [] };
    const server = channelServer(Date.now(), { type: "lifecycle", v: CHANNEL_VERSION, config: terminate });
    const { exit } = slowAgent({ connect: server.connect }, driver);
    let exited: AgentExit | null = null;
    void exit.then((e) => (exited = e));

    await until("a heartbeat during the terminate pass", () => server.heard.length > 0);
    server.push({ type: "desired", v: CHANNEL_VERSION, config: { ...config, generation: 3 } });
    await new Promise((r) => setTimeout(r, 200));
    driver.finish();

    // The cancel's pass starts the agent again and is reported; the loop runs on.
    const cancelled = () => server.heard.some((h) => h.generation === 3 && h.agents === 1);
    await until("the cancel's report or an exit", () => exited !== null || cancelled());
    expect(exited).toBeNull();
    expect(cancelled()).toBe(true);
    expect(driver.installed.get(spec.name)?.state).toBe("running");
  });
});

/** A machine whose listing fails (the engine does not answer) while `failing`, or (`waits`) waits until `finish()`. */
class Unanswering extends SlowInstall {
  failing = false;
  private readonly waits: boolean;
  private answered!: () => void;
  private readonly answers = new Promise<void>((r) => (this.answered = r));
  constructor(waits = false, opts: ConstructorParameters<typeof MemoryDriver>[0] = {}) {
    super(opts);
    this.waits = waits;
  }
  /** Lets the listing answer, and installs and stops finish. */
  override finish() {
    super.finish();
    this.answered();
  }
  override async list() {
    if (this.waits) await this.answers;
    if (this.failing) throw new Error("ps timed out after 60 s (killed)");
    return super.list();
  }
}

describe("a pass that cannot list the machine", () => {
  it("reports under the generation last reconciled, not the one it could not reach", async () => {
    const spec = config.agents[0];
    const driver = new Unanswering();
    driver.installed.set(spec.name, { ...spec, state: "running" });
    driver.finish();
    const server = channelServer(Date.now());
    slowAgent({ connect: server.connect }, driver);
    await until("generation 1 reported", () => server.heard.some((h) => h.generation === 1));

    // Generation 2 comes while the engine does not answer: the host is alive, its engine failing,
    // and still at 1 (a rollout's mark at 2 stays pending), not failed at 2.
    driver.failing = true;
    server.push({ type: "desired", v: CHANNEL_VERSION, config: { ...config, generation: 2 } });
    await until("an errored report", () => server.heard.some((h) => (h.errors ?? 0) > 0));
    const errored = server.heard.filter((h) => (h.errors ?? 0) > 0);
    expect(errored.map((h) => h.generation)).toEqual(errored.map(() => 1));
    expect(server.heard.some((h) => h.generation === 2)).toBe(false);

    // Once it answers, the pass reaches generation 2 and says so.
    driver.failing = false;
    await until("generation 2 reported", () => server.heard.some((h) => h.generation === 2 && h.errors === 0));
  });

  it("before the machine ever answered, reports nothing and tries again with backoff", async () => {
    const driver = new Unanswering();
    driver.failing = true;
    const server = channelServer(Date.now());
    const failures: number[] = [];
    slowAgent(
      {
        connect: server.connect,
        random: () => 0.5,
        onEvent: (e) => void (e.type === "error" && failures.push(e.delayMs)),
      },
      driver,
    );
    await until("two failed passes", () => failures.length >= 2);
    expect(server.heard).toEqual([]);
    // Backed off as from a failed call: 0.5 s, then 1 s (full jitter at one half).
    expect(failures.slice(0, 2)).toEqual([500, 1000]);
    driver.failing = false;
    driver.finish();
    await until("the pass's report", () => server.heard.some((h) => h.generation === 1));
    expect(server.heard[0]).toMatchObject({ generation: 1, agents: 1, errors: 0 });
  });
});

describe("the heartbeat before any report", () => {
  it("waits for the machine's first answer: no claim that the host runs nothing", async () => {
    const spec = config.agents[0];
    // An agent restarted on a host that runs its agent; the first listing is slow to answer.
    const driver = new Unanswering(true);
    driver.installed.set(spec.name, { ...spec, state: "running" });
    const server = channelServer(Date.now());
    let tries = 0;
    slowAgent({ connect: server.connect, onEvent: (e) => void (e.type === "reconciling" && tries++) }, driver);

    await new Promise((r) => setTimeout(r, 2_500));
    expect(server.heard).toEqual([]);
    // Held back once a period, not retried in a busy loop.
    expect(tries).toBeGreaterThanOrEqual(1);
    expect(tries).toBeLessThanOrEqual(3);
    driver.finish();
    await until("the pass's report", () => server.heard.some((h) => h.generation === 1));
    expect(server.heard.every((h) => h.agents === 1)).toBe(true);
  });

  it("is not sent with assignments the agent could not read", async () => {
    // The listing answers, the install takes long, and the assignments cannot be read.
    const driver = new Unanswering(false, { assignments: { units: ["u-1"], storage: [] } });
    driver.assignments = async () => {
      throw new Error("the unit database is locked");
    };
    const server = channelServer(Date.now());
    slowAgent({ connect: server.connect }, driver);

    await new Promise((r) => setTimeout(r, 2_500));
    // Neither a heartbeat nor the pass's report: both would say the host carries nothing.
    expect(server.heard).toEqual([]);
  });

  it("nor is the pass's report, once done, while the assignments were never read", async () => {
    const driver = new Unanswering(false, { assignments: { units: ["u-1"], storage: [] } });
    const readable = driver.assignments!.bind(driver);
    let locked = true;
    driver.assignments = async () => {
      if (locked) throw new Error("the unit database is locked");
      return readable();
    };
    driver.finish();
    const server = channelServer(Date.now());
    let failed = 0;
    slowAgent(
      { connect: server.connect, random: () => 0, onEvent: (e) => void (e.type === "error" && failed++) },
      driver,
    );
    await until("a failed pass", () => failed > 0);
    expect(server.heard).toEqual([]);
    locked = false;
    await until("the pass's report", () => server.heard.length > 0);
    expect(server.heard[0]).toMatchObject({ generation: 1, agents: 1, units: 1, errors: 0 });
  });

  it("carries the assignments read before the pass's slow work", async () => {
    const driver = new Unanswering(false, { assignments: { units: ["u-1"], storage: [] } });
    const server = channelServer(Date.now());
    slowAgent({ connect: server.connect }, driver);
    await until("a heartbeat", () => server.heard.length > 0);
    expect(server.heard[0]).toMatchObject({ generation: 0, agents: 0, units: 1 });
  });
});

describe("a wait woken by the pass's end", () => {
  it("leaves no listener behind per wait, and wakes at once for a pass already ended", () => {
    const ended = new AbortController();
    for (let i = 0; i < 100; i++) wakeOn(undefined, ended.signal).done();
    expect(getEventListeners(ended.signal, "abort")).toHaveLength(0);
    ended.abort();
    const wake = wakeOn(undefined, ended.signal);
    expect(wake.woken()).toBe(true);
    expect(wake.signal?.aborted).toBe(true);
  });
});
