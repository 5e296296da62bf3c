import { describe, expect, it } from "vitest";
import { backoffDelay, retryAfterMs } from "../agent/backoff";
import { HostAgent } from "../agent/agent";
import { FleetLockClient } from "../agent/fleetlock";
import { MemoryDriver } from "../agent/memory-driver";
import { BASE, call, createFleet, registerServer, settle } from "./helpers";
import { reported, runAgent, workerFetch } from "./agent-helpers";
import { fleetWithKey, getGroup, putGroup, registerClients } from "./fleetlock-helpers";

const agents = (...names: string[]) => names.map((n) => ({ name: n, image: `reg/${n}:1`, version: "1" }));

describe("reference host agent (against the worker)", () => {
  it("converges to realized, then learns of a new generation through the long poll, not the heartbeat", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents: agents("compute", "logs") } });
    const driver = new MemoryDriver();
    const run = runAgent(s.token, driver, { transport: "http" });
    try {
      await run.until(reported(2, "realized"));
      expect([...driver.installed.keys()].sort()).toEqual(["compute", "logs"]);

      const changedAt = Date.now();
      await call("PUT", `/v1/servers/${s.id}/desired`, {
        body: { generation: 3, agents: [{ name: "compute", image: "reg/compute:2", version: "2" }] },
      });
      await run.until(reported(3, "realized"));
      // The long poll (20 s) and the heartbeat (60 s) are both far away: only the wake explains this.
      expect(Date.now() - changedAt).toBeLessThan(5_000);
      expect([...driver.installed.values()].map((a) => [a.name, a.image])).toEqual([["compute", "reg/compute:2"]]);
      const view = await call("GET", `/v1/servers/${s.id}`);
      expect(view.json.status).toBe("realized");
      expect(view.json.report.boot_id).toBe("boot-a");
    } finally {
      run.stop();
    }
    expect(await run.exit).toEqual({ reason: "aborted" });
  });

  it("reports a failing install as failed with the driver's message and never as realized", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents: agents("compute", "logs") } });
    const driver = new MemoryDriver({ failInstall: (n) => n === "logs" });
    const run = runAgent(s.token, driver, { reportIntervalMs: 300 });
    try {
      await run.until(reported(2));
      // Heartbeats retry the install; each pass fails again and says so.
      await run.until((e) => e.type === "reported" && run.events.filter((x) => x.type === "reported").length >= 3);
    } finally {
      run.stop();
    }
    await run.exit;
    const reports = run.events.filter((e) => e.type === "reported");
    expect(reports.every((e) => e.type === "reported" && e.accepted.status === "failed")).toBe(true);
    const view = await call("GET", `/v1/servers/${s.id}`);
    expect(view.json.status).toBe("failed");
    const logs = view.json.agents.find((a: { name: string }) => a.name === "logs");
    expect(logs.status).toBe("failed");
    expect(logs.errors[0]).toMatchObject({ op: "install", message: expect.stringContaining("injected") });
  });

  it("keeps a failed removal visible as removal_failed", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents: agents("compute", "logs") } });
    const driver = new MemoryDriver({ failRemove: (n) => n === "logs" });
    const run = runAgent(s.token, driver);
    try {
      await run.until(reported(2, "realized"));
      await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 3, agents: agents("compute") } });
      const e = await run.until(reported(3));
      expect(e.type === "reported" && e.accepted.status).toBe("failed");
    } finally {
      run.stop();
    }
    await run.exit;
    const view = await call("GET", `/v1/servers/${s.id}`);
    expect(view.json.agents.map((a: { name: string; status: string }) => [a.name, a.status])).toEqual([
      ["compute", "realized"],
      ["logs", "removal_failed"],
    ]);
  });

  it("honours Retry-After, backs off with jitter on other errors, and carries on once the server answers", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    let calls = 0;
    const flaky = async (input: string | URL | Request, init?: RequestInit) => {
      calls++;
      if (calls === 1)
        return new Response(JSON.stringify({ error: { code: "busy", message: "later" } }), {
          status: 503,
          headers: { "Retry-After": "7" },
        });
      if (calls === 2) throw new TypeError("connection refused");
      if (calls === 3) return new Response("bad gateway", { status: 502 });
      return workerFetch(input, init);
    };
    const sleeps: number[] = [];
    const run = runAgent(s.token, new MemoryDriver(), {
      transport: "http",
      fetch: flaky,
      random: () => 0.5,
      backoff: { baseMs: 1000, capMs: 3000 },
      sleep: async (ms) => void sleeps.push(ms),
    });
    try {
      await run.until(reported(1, "realized"));
    } finally {
      run.stop();
    }
    await run.exit;
    // 7 s from Retry-After; then (random = 0.5) half of 2 s and half of 4 s capped at 3 s.
    expect(sleeps.slice(0, 3)).toEqual([7000, 1000, 1500]);
    const errors = run.events.filter((e) => e.type === "error");
    expect(errors.map((e) => e.type === "error" && [e.attempt, e.delayMs])).toEqual([
      [1, 7000],
      [2, 1000],
      [3, 1500],
    ]);
  });

  it("does not busy-poll a server that answers 304 without parking", async () => {
    const config = { server_id: "s", generation: 1, agents: [], lifecycle: "run" };
    let polls = 0;
    const instant = async (input: string | URL | Request) => {
      await new Promise((r) => setTimeout(r, 0)); // answers at once, but lets timers run
      if (String(input).includes("/v1/agent/desired")) {
        polls++;
        return polls === 1
          ? new Response(JSON.stringify(config), { status: 200, headers: { ETag: '"1"' } })
          : new Response(null, { status: 304, headers: { ETag: '"1"' } });
      }
      return new Response(JSON.stringify({ server_id: "s", desired_generation: 1, status: "realized", agents: [] }), {
        status: 200,
      });
    };
    const controller = new AbortController();
    const agent = new HostAgent({
      url: BASE,
      token: "t",
      driver: new MemoryDriver(),
      bootId: "b",
      transport: "http",
      waitS: 30,
      reportIntervalMs: 60_000,
      minPollIntervalMs: 200,
      fetch: instant,
    });
    const exit = agent.run(controller.signal);
    await new Promise((r) => setTimeout(r, 1_000));
    controller.abort();
    await exit;
    // One poll at start, then at most one per 200 ms.
    expect(polls).toBeGreaterThanOrEqual(3);
    expect(polls).toBeLessThanOrEqual(7);
  });

  it("stops for good when its token is refused", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const run = runAgent(s.token.slice(0, -3) + "xyz", new MemoryDriver());
    expect((await run.exit).reason).toBe("unauthorized");
  });

  it("follows lifecycle orders: terminate stops agents and ends the loop, uninstall removes them", async () => {
    const fleet = await createFleet();
    for (const lifecycle of ["terminate", "uninstall"] as const) {
      // Decommissioning orders terminate for a managed server, uninstall for a manual one.
      const s = await registerServer(fleet.id, { kind: lifecycle === "terminate" ? "managed" : "manual" });
      await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents: agents("compute", "logs") } });
      const driver = new MemoryDriver();
      const run = runAgent(s.token, driver);
      await run.until(reported(2, "realized"));
      expect((await call("POST", `/v1/servers/${s.id}/decommission`, { body: {} })).status).toBe(200);
      const exit = await Promise.race([
        run.exit,
        new Promise<never>((_, rej) => setTimeout(() => rej(new Error("loop did not end")), 10_000)),
      ]);
      expect(exit).toEqual({ reason: lifecycle === "terminate" ? "terminated" : "uninstalled", generation: 3 });
      if (lifecycle === "terminate") {
        expect([...driver.installed.values()].map((a) => a.state)).toEqual(["stopped", "stopped"]);
      } else {
        expect(driver.installed.size).toBe(0);
      }
      const view = await call("GET", `/v1/servers/${s.id}`);
      expect(view.json.report.generation).toBe(3);
      expect(view.json.report.agents).toEqual([]);
    }
  });
});

describe("retry timing", () => {
  it("grows exponentially under a cap and jitters over the whole range", () => {
    const policy = { baseMs: 100, capMs: 1000 };
    expect([1, 2, 3, 4, 5, 10].map((n) => backoffDelay(n, policy, () => 0.999999))).toEqual([
      99, 199, 399, 799, 999, 999,
    ]);
    expect(backoffDelay(6, policy, () => 0)).toBe(0);
  });

  it("reads Retry-After as seconds or an HTTP date, capped, never negative", () => {
    const now = Date.parse("2026-11-22T06:00:00Z");
    expect(retryAfterMs("10", now)).toBe(10_000);
    expect(retryAfterMs("Sun, 22 Nov 2026 06:00:30 GMT", now)).toBe(30_000);
    expect(retryAfterMs("Sun, 22 Nov 2026 05:00:00 GMT", now)).toBe(0);
    expect(retryAfterMs("999999", now)).toBe(15 * 60_000);
    expect(retryAfterMs("soon", now)).toBeNull();
    expect(retryAfterMs(null, now)).toBeNull();
  });
});

describe("FleetLock client", () => {
  it("sends what Zincati sends: URL under base_url, the protocol header, a pretty body, no Content-Type", async () => {
    const seen: { url: string; headers: Headers; body: string; method?: string }[] = [];
    const capture = async (input: string | URL | Request, init?: RequestInit) => {
      seen.push({
        url: String(input),
        headers: new Headers(init?.headers),
        body: new TextDecoder().decode(init?.body as Uint8Array),
        method: init?.method,
      });
      return new Response(JSON.stringify({ kind: "semaphore_full", value: "all 1 slots are held" }), { status: 409 });
    };
    const client = new FleetLockClient(
      "https://hm.test/fleetlock/prod/KEY/",
      { id: "node-1", group: "workers" },
      capture,
    );
    expect(await client.preReboot()).toEqual({
      ok: false,
      status: 409,
      kind: "semaphore_full",
      value: "all 1 slots are held",
    });
    await client.steadyState();
    expect(seen.map((s) => [s.method, s.url])).toEqual([
      ["POST", "https://hm.test/fleetlock/prod/KEY/v1/pre-reboot"],
      ["POST", "https://hm.test/fleetlock/prod/KEY/v1/steady-state"],
    ]);
    expect(seen[0].headers.get("fleet-lock-protocol")).toBe("true");
    expect(seen[0].headers.get("content-type")).toBeNull();
    expect(seen[0].body).toBe('{\n  "client_params": {\n    "id": "node-1",\n    "group": "workers"\n  }\n}');
    expect(() => new FleetLockClient("https://hm.test/fleetlock/prod/KEY", { id: "x" })).toThrow(/must end with/);
  });

  it("names a rejection without a FleetLock body generic_http_<status>, as Zincati does", async () => {
    const client = new FleetLockClient(
      "https://hm.test/fl/",
      { id: "n" },
      async () => new Response("<html>", { status: 502 }),
    );
    expect(await client.preReboot()).toEqual({
      ok: false,
      status: 502,
      kind: "generic_http_502",
      value: "(unknown server error)",
    });
  });

  it("takes and gives back slots on the worker; a report with a new boot_id frees a slot whose steady-state was lost", async () => {
    const { fleet, baseUrl } = await fleetWithKey();
    await putGroup(fleet, "default", { slots: 1 });
    const [a, b] = await registerClients(fleet, 2);
    const clientA = new FleetLockClient(baseUrl, { id: a.id }, workerFetch);
    const clientB = new FleetLockClient(baseUrl, { id: b.id }, workerFetch);
    expect(await clientA.preReboot()).toEqual({ ok: true, status: 200 });
    expect(await clientB.preReboot()).toMatchObject({ ok: false, status: 409, kind: "semaphore_full" });

    // A reports before its reboot, reboots (new boot id), and its steady-state is lost.
    const driver = new MemoryDriver();
    for (const bootId of ["boot-1", "boot-2"]) {
      const run = runAgent(a.token, driver, { bootId });
      await run.until(reported(1));
      run.stop();
      await run.exit;
    }
    await settle(a.serverId);
    expect((await getGroup(fleet, "default")).holders).toEqual([]);
    expect(await clientB.preReboot()).toEqual({ ok: true, status: 200 });
    expect(await clientB.steadyState()).toEqual({ ok: true, status: 200 });
  });
});
