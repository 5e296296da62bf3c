/**
 * hm's reboot-safety commands against the local server: gates and holds, the release rule and
 * the queue, webhooks (docs/reboot-safety.md).
 */
import { createServer } from "node:http";
import { afterAll, describe, expect, inject, it } from "vitest";
import { HostApi } from "../agent/host-api.ts";
import { adminApi, hmRunner } from "./harness.ts";

const hm = hmRunner("safety");

const received: string[] = [];
const receiver = createServer((req, res) => {
  let body = "";
  req.on("data", (d) => (body += d));
  req.on("end", () => {
    received.push(body);
    res.writeHead(200).end();
  });
});
const port = await new Promise<number>((r) =>
  receiver.listen(0, "127.0.0.1", () => r((receiver.address() as { port: number }).port)),
);
afterAll(() => new Promise<void>((r) => receiver.close(() => r())));

describe("hm: reboot safety", () => {
  it("sets gates and holds, the release rule, and shows them", async () => {
    const fleet = `safe-${Date.now().toString(36)}`;
    expect((await hm(["fleets", "create", fleet])).code).toBe(0);
    const set = await hm([
      "--json",
      "reboot-groups",
      "set",
      "default",
      "--fleet",
      fleet,
      "--slots",
      "2",
      "--release-on",
      "healthy_report",
      "--health-timeout",
      "600",
      "--no-pause-on-unhealthy",
    ]);
    expect(set.code).toBe(0);
    expect(set.json()).toMatchObject({
      release_on: "healthy_report",
      health_timeout_s: 600,
      pause_on_unhealthy: false,
    });
    expect(
      (await hm(["reboot-groups", "set", "default", "--fleet", fleet, "--slots", "2", "--release-on", "sometimes"]))
        .code,
    ).toBe(2);

    const gates = await hm(["--json", "gates", "set", "--fleet", fleet, "--max-unhealthy-percent", "10", "--rollouts"]);
    expect(gates.code).toBe(0);
    expect(gates.json().default).toEqual({
      fleet_health: { max_unhealthy: null, max_unhealthy_percent: 10 },
      rollouts: true,
    });
    const own = await hm(["--json", "gates", "set", "--fleet", fleet, "--group", "default", "--none"]);
    expect(own.json()).toMatchObject({ gates_source: "group", own_gates: {} });

    expect((await hm(["hold", "default", "--fleet", fleet, "--reason", "kernel regression", "--for", "2h"])).code).toBe(
      0,
    );
    const show = await hm(["reboot-groups", "show", "default", "--fleet", fleet, "--no-color"]);
    expect(show.stdout).toMatch(/hold\s+kernel regression \(by token:bootstrap, until /);
    expect(show.stdout).toMatch(/release on\s+healthy report \(within 600s, then keep going\)/);
    expect(show.stdout).toMatch(/gates\s+hold CLOSED \(group\)/);
    expect((await hm(["unhold", "default", "--fleet", fleet])).code).toBe(0);
    expect((await hm(["hold", "--fleet", fleet, "--reason", "freeze"])).code).toBe(0);
    const fleetGates = await hm(["gates", "--fleet", fleet, "--no-color"]);
    expect(fleetGates.stdout).toMatch(/hold\s+freeze/);
    expect((await hm(["unhold", "--fleet", fleet])).code).toBe(0);
  });

  it("adds a webhook (its secret printed once), tests it, lists its deliveries, and removes it", async () => {
    const fleet = `hooks-${Date.now().toString(36)}`;
    expect((await hm(["fleets", "create", fleet])).code).toBe(0);
    const add = await hm([
      "webhooks",
      "add",
      "--fleet",
      fleet,
      "--to",
      `http://127.0.0.1:${port}/slack`,
      "--format",
      "slack",
      "--event",
      "reboot.gate_closed,reboot.unhealthy_after_reboot",
    ]);
    expect(add.code, add.stderr).toBe(0);
    expect(add.stdout).toMatch(/Signing secret \(shown once\): [A-Za-z0-9_-]{43}/);
    const list = await hm(["--json", "webhooks", "list", "--fleet", fleet]);
    const id = list.json()[0].id as string;
    expect(list.stdout).not.toMatch(/secret/);
    // A short id names it as well as the full one.
    const test = await hm(["webhooks", "test", id.slice(0, 8), "--fleet", fleet]);
    expect(test.stdout).toMatch(/Delivered \(HTTP 200\)/);
    expect(JSON.parse(received.at(-1)!).text).toMatch(/Test delivery/);
    const log = await hm(["webhooks", "deliveries", id, "--fleet", fleet, "--no-color"]);
    expect(log.stdout).toMatch(/webhook\.test\s+delivered\s+1/);
    const bad = await hm([
      "webhooks",
      "add",
      "--fleet",
      fleet,
      "--to",
      "https://hooks.example.com/x",
      "--event",
      "reboot.sideways",
    ]);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toMatch(/validation_failed/);
    // A webhook that does not exist is refused before the question is asked.
    const typo = await hm(["webhooks", "rm", "3f0c0000", "--fleet", fleet]);
    expect(typo.code).toBe(1);
    expect(typo.stderr).toMatch(/no webhook of .* '3f0c0000'; known: /);
    expect(typo.stderr).not.toMatch(/\[y\/N\]/);
    expect((await hm(["--yes", "webhooks", "rm", id, "--fleet", fleet])).code).toBe(0);
    expect((await hm(["-o", "yaml", "webhooks", "list", "--fleet", fleet])).stdout).toBe("[]\n");
  });
});

describe("hm: drift fixes' units of the budget", () => {
  it("lists the unit a fix holds for a server that never reported it realized, and frees it (asked first)", async () => {
    const fleet = `fixh-${Date.now().toString(36)}`;
    expect(
      (await adminApi("POST", "/v1/fleets", { id: fleet, disruption_budget: { max_unavailable: 1 } })).status,
    ).toBe(201);
    const s = (await adminApi("POST", "/v1/servers", { fleet, hostname: `web-1.${fleet}.test`, kind: "managed" })).json;
    await adminApi("PUT", `/v1/servers/${s.id}/desired`, {
      generation: 2,
      agents: [{ name: "web", image: "reg/web:1", version: "1" }],
    });
    const report = (image: string) =>
      new HostApi(inject("hmUrl"), s.token).report({
        generation: 2,
        reconciled_at: new Date().toISOString(),
        boot_id: "b1",
        agents: [{ name: "web", image, version: "1", instance_id: "i1", state: "running" }],
        errors: [],
        assignments: { units: [], storage: [] },
      });
    await report("reg/web:1");
    await report("reg/web:0");
    await expect
      .poll(async () => (await adminApi("GET", `/v1/check/server-agents?fleet=${fleet}`)).json.findings.length)
      .toBeGreaterThan(0);
    const fixed = await hm(["--json", "check", "server-agents", "--fleet", fleet, "--fix", "--yes"]);
    expect(fixed.code).toBe(0);

    const listed = await hm(["--json", "fix-holds", "--fleet", fleet]);
    expect(listed.code).toBe(0);
    expect(listed.json()).toEqual([
      expect.objectContaining({ server: { id: s.id, hostname: s.hostname }, state: "written", written_generation: 3 }),
    ]);
    expect((await hm(["fix-holds", "--fleet", fleet])).stdout).toContain(s.hostname);
    // Not interactive and no --yes: asked first, so nothing is freed.
    const asked = await hm(["fix-holds", "release", s.hostname, "--fleet", fleet]);
    expect(asked.code).not.toBe(0);
    expect((await hm(["--json", "fix-holds", "--fleet", fleet])).json()).toHaveLength(1);
    const freed = await hm(["fix-holds", "release", s.hostname, "--fleet", fleet, "--yes"]);
    expect(freed.code).toBe(0);
    expect(freed.stdout).toContain(`Freed the unit held for ${s.hostname} (written since`);
    expect((await hm(["--json", "fix-holds", "--fleet", fleet])).json()).toEqual([]);
    const again = await hm(["fix-holds", "release", s.hostname, "--fleet", fleet, "--yes"]);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain("not_held");
  });
});
