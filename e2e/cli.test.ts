import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { describe, expect, inject, it } from "vitest";
import { FleetLockClient } from "../agent/fleetlock.ts";
import { HostApi } from "../agent/host-api.ts";
import { Api } from "../cli/api.ts";
import { hmRunner } from "./hm.ts";

const url = inject("hmUrl");
const admin = inject("hmAdmin");
const api = new Api(url, admin);
const home = mkdtempSync(join(tmpdir(), "hm-cli-"));

const hm = hmRunner(url, admin, home);

let n = 0;
const fleetId = () => `cli-${Date.now().toString(36)}-${n++}`;

async function fleetWithServer(hostname = `h${n}.example.com`) {
  const fleet = fleetId();
  expect((await hm(["fleets", "create", fleet, "--stale-after", "600"])).code).toBe(0);
  const reg = await hm([
    "--json",
    "servers",
    "register",
    "--fleet",
    fleet,
    "--hostname",
    hostname,
    "--fleetlock-id",
    `fl-${hostname}`,
  ]);
  expect(reg.code).toBe(0);
  return { fleet, server: reg.json() as { id: string; token: string } };
}

const agentsFile = (agents: string[], extra: Record<string, unknown> = {}) => {
  const file = join(home, `desired-${n++}.json`);
  writeFileSync(
    file,
    JSON.stringify({ agents: agents.map((a) => ({ name: a, image: `reg/${a}:1`, version: "1" })), ...extra }),
  );
  return file;
};

describe("hm servers LAST SEEN", () => {
  it("shows each listed server's last report from its ledger, not the index's older figure", async () => {
    const { fleet, server } = await fleetWithServer();
    const host = new HostApi(url, server.token);
    const report = () =>
      host.report({
        generation: 1,
        reconciled_at: new Date().toISOString(),
        boot_id: "b1",
        agents: [],
        errors: [],
        assignments: { units: [], storage: [] },
      });
    await report();
    // The index keeps the first report's time while nothing changes (its refresh is leased).
    await new Promise((r) => setTimeout(r, 1_100));
    await report();
    const exact = (await api.getServer(server.id)).last_seen!;
    const indexed = (await api.listServers({ fleet })).find((s) => s.id === server.id)!.last_seen!;
    expect(Date.parse(exact)).toBeGreaterThan(Date.parse(indexed));
    const table = await hm(["--absolute-times", "servers", "--fleet", fleet]);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout, table.stderr).toContain(exact);
    expect(table.stdout).not.toContain(indexed);
  });
});

describe("hm against the worker", () => {
  it("lists fleets and servers as tables, and as stable JSON with --json", async () => {
    const { fleet, server } = await fleetWithServer();
    const table = await hm(["fleets"]);
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(
      /^FLEET\s+SERVERS\s+HEALTH\s+REALIZED\s+FAILED\s+STALE\s+DRIFTED\s+ROLLOUTS\s+STALE AFTER/,
    );
    // Every fleet counted on the server (GET /v1/status/fleets), this one's server included.
    expect(table.stdout).toMatch(new RegExp(`^${fleet}\\s+1\\s+ok\\s`, "m"));

    const fleets = await hm(["--json", "fleets"]);
    expect(fleets.json().find((f: { id: string }) => f.id === fleet)).toMatchObject({
      id: fleet,
      stale_after_s: 600,
      lock_ttl_s: 3600,
    });

    const list = await hm(["--json", "servers", "list", "--fleet", fleet]);
    expect(list.json()).toEqual([
      expect.objectContaining({
        id: server.id,
        fleet,
        state: "provisioning",
        status: "unknown",
        desired_generation: 1,
      }),
    ]);
    const show = await hm(["--json", "servers", "show", server.id]);
    expect(Object.keys(show.json()).sort()).toEqual([
      "agents",
      "created_at",
      "desired",
      "desired_generation",
      "fleet",
      "fleetlock_id",
      "hostname",
      "id",
      "kind",
      "labels",
      "last_seen",
      "lifecycle",
      "planning",
      "reboot_group",
      "refresh",
      "report",
      "reported_generation",
      "roles",
      "state",
      "status",
    ]);
    const human = await hm(["servers", "show", server.id]);
    expect(human.stdout).toMatch(/status\s+unknown/);
  });

  it("exits 2 for usage mistakes and 1 with the API's code and message for errors", async () => {
    expect((await hm(["servers", "frobnicate"])).code).toBe(2);
    expect((await hm(["servers", "register", "--hostname", "x.example.com"])).code).toBe(2);
    expect((await hm(["servers", "list", "--status", "happy"])).code).toBe(2);
    const missing = await hm(["servers", "show", crypto.randomUUID()]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/^error: not_found: server '.*' does not exist/);
    const unknownFleet = await hm(["servers", "register", "--fleet", "no-such-fleet", "--hostname", "a.example.com"]);
    expect(unknownFleet.code).toBe(1);
    expect(unknownFleet.stderr).toContain("unknown_fleet");
    const noToken = await hm(["fleets"], { auth: false });
    expect(noToken.code).toBe(2);
    expect(noToken.stderr).toContain("no token");
    const badToken = await hm(["fleets"], { env: { HM_TOKEN: "hmo.nope.nope" } });
    expect(badToken.code).toBe(1);
    expect(badToken.stderr).toContain("unauthorized");
  });

  it("desired set issues the next generation from a file and asks before removing agents", async () => {
    const { server } = await fleetWithServer();
    const set = await hm(["--json", "desired", "set", server.id, "-f", agentsFile(["compute", "logs"])]);
    expect(set.code).toBe(0);
    expect(set.json()).toMatchObject({ generation: 2, lifecycle: "run" });

    const shrink = agentsFile(["compute"]);
    const declined = await hm(["desired", "set", server.id, "-f", shrink], { stdin: "n\n" });
    expect(declined.code).toBe(1);
    expect(declined.stderr).toContain("removes logs");
    expect((await api.getDesired(server.id)).generation).toBe(2);
    const noAnswer = await hm(["desired", "set", server.id, "-f", shrink]);
    expect(noAnswer.code).toBe(1);
    expect((await api.getDesired(server.id)).generation).toBe(2);

    const accepted = await hm(["desired", "set", server.id, "-f", shrink], { stdin: "y\n" });
    expect(accepted.code).toBe(0);
    expect((await api.getDesired(server.id)).agents.map((a) => a.name)).toEqual(["compute"]);

    const fromStdin = await hm(["--yes", "--json", "desired", "set", server.id, "-f", "-"], {
      stdin: JSON.stringify({ agents: [], lifecycle: "run" }),
    });
    expect(fromStdin.code).toBe(0);
    expect(fromStdin.json()).toMatchObject({ generation: 4, agents: [] });
    const get = await hm(["--json", "desired", "get", server.id]);
    expect(get.json()).toEqual({ server_id: server.id, generation: 4, agents: [], lifecycle: "run" });
    const conflict = await hm(["desired", "set", server.id, "-f", agentsFile(["x"], { generation: 3 })]);
    expect(conflict.code).toBe(1);
    expect(conflict.stderr).toContain("stale_generation");
  });

  it("wait server --realized returns 0 when a report realizes the server, and 3 when time runs out", async () => {
    const { server } = await fleetWithServer();
    await api.putDesired(server.id, { generation: 2, agents: [{ name: "logs", image: "reg/logs:1", version: "1" }] });
    const timedOut = await hm(["wait", "server", server.id, "--realized", "--timeout", "1"]);
    expect(timedOut.code).toBe(3);
    expect(timedOut.stderr).toContain("timed out");

    const started = Date.now();
    let requests = 0;
    const counting: typeof fetch = (input, init) => (requests++, fetch(input, init));
    const waiting = hm(["--json", "wait", "server", server.id, "--realized", "--timeout", "30"], { fetch: counting });
    await new Promise((r) => setTimeout(r, 2_500));
    await new HostApi(url, server.token).report({
      generation: 2,
      reconciled_at: new Date().toISOString(),
      boot_id: "b1",
      agents: [{ name: "logs", image: "reg/logs:1", version: "1", instance_id: "i1", state: "running" }],
      errors: [],
      assignments: { units: [], storage: [] },
    });
    const done = await waiting;
    expect(done.code).toBe(0);
    expect(done.json()).toMatchObject({ id: server.id, status: "realized", reported_generation: 2 });
    // Woken by the report, not by a poll interval or the 30 s timeout: one look, one parked request.
    expect(Date.now() - started).toBeLessThan(8_000);
    expect(requests).toBe(2);
  });

  it("reboot groups: set, pause, resume, show; release asks first", async () => {
    const { fleet, server } = await fleetWithServer("rb.example.com");
    expect((await hm(["reboot-groups", "set", "default", "--fleet", fleet, "--slots", "2"])).code).toBe(0);
    const queued = await hm([
      "--json",
      "reboot-groups",
      "set",
      "default",
      "--fleet",
      fleet,
      "--slots",
      "2",
      "--queue-wait",
      "30",
    ]);
    expect(queued.json()).toMatchObject({ slots: 2, queue_wait_s: 30, queue: [] });
    expect((await hm(["--json", "reboot-groups", "pause", "default", "--fleet", fleet])).json()).toMatchObject({
      paused: true,
      slots: 2,
      queue_wait_s: 30,
    });
    expect((await hm(["--json", "reboot-groups", "resume", "default", "--fleet", fleet])).json()).toMatchObject({
      paused: false,
      slots: 2,
    });

    const rotated = await hm(["--yes", "fleetlock-key", "rotate", "--fleet", fleet]);
    expect(rotated.code).toBe(0);
    const baseUrl = /base_url = "([^"]+)"/.exec(rotated.stdout)![1];
    expect(baseUrl).toMatch(new RegExp(`/fleetlock/${fleet}/[^/]+/$`));
    expect(rotated.stdout).toContain('strategy = "fleet_lock"');
    expect(await new FleetLockClient(baseUrl, { id: "fl-rb.example.com" }).preReboot()).toEqual({
      ok: true,
      status: 200,
    });

    const shown = await hm(["--json", "reboot-groups", "show", "default", "--fleet", fleet]);
    expect(shown.json().holders).toEqual([
      expect.objectContaining({ id: "fl-rb.example.com", server: { id: server.id, hostname: "rb.example.com" } }),
    ]);
    const table = await hm(["reboot-groups", "--fleet", fleet]);
    expect(table.stdout).toMatch(/default\s+1\s+2\s+no/);

    const declined = await hm(["reboot-groups", "release", "default", "fl-rb.example.com", "--fleet", fleet], {
      stdin: "no\n",
    });
    expect(declined.code).toBe(1);
    expect((await api.getGroup(fleet, "default")).holders).toHaveLength(1);
    const released = await hm(
      ["--json", "reboot-groups", "release", "default", "fl-rb.example.com", "--fleet", fleet],
      { stdin: "yes\n" },
    );
    expect(released.code).toBe(0);
    expect(released.json().released.id).toBe("fl-rb.example.com");
    expect((await api.getGroup(fleet, "default")).holders).toHaveLength(0);
  });

  it("status shows the fleet on one screen; --check exits 3 when a server failed", async () => {
    const { fleet, server } = await fleetWithServer();
    await api.putDesired(server.id, { generation: 2, agents: [{ name: "logs", image: "reg/logs:1", version: "1" }] });
    expect((await hm(["status", "--fleet", fleet, "--check"])).code).toBe(0);
    await new HostApi(url, server.token).report({
      generation: 2,
      reconciled_at: new Date().toISOString(),
      boot_id: "b1",
      agents: [],
      errors: [{ agent: "logs", op: "install", message: "pull failed" }],
      assignments: { units: [], storage: [] },
    });
    // The index follows the report in the background.
    let status;
    for (let i = 0; i < 20; i++) {
      status = await hm(["--json", "status", "--fleet", fleet]);
      if (status.json().fleets[0].servers.by_status.failed) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(status!.json()).toMatchObject({
      url,
      data: { state: "current" },
      fleets: [
        {
          id: fleet,
          servers: { total: 1, by_status: { failed: 1 }, by_state: { active: 1 } },
          attention: [
            { status: "failed", count: 1, items: [{ id: server.id, status: "failed" }] },
            { status: "stale", count: 0 },
            { status: "drifted", count: 0 },
          ],
          rollouts: [],
        },
      ],
    });
    const check = await hm(["status", "--fleet", fleet, "--check"]);
    expect(check.code).toBe(3);
    expect(check.stdout).toContain(`Fleet ${fleet}`);
  });

  it("check server-agents exits 3 with the findings of a failed install, 0 when nothing drifts; decommission asks first", async () => {
    const { fleet, server } = await fleetWithServer();
    await api.putDesired(server.id, { generation: 2, agents: [{ name: "logs", image: "reg/logs:1", version: "1" }] });
    await new HostApi(url, server.token).report({
      generation: 2,
      reconciled_at: new Date().toISOString(),
      boot_id: "b1",
      agents: [],
      errors: [{ agent: "logs", op: "install", message: "pull failed" }],
      assignments: { units: [], storage: [] },
    });
    let check;
    for (let i = 0; i < 20; i++) {
      check = await hm(["--json", "check", "server-agents", "--fleet", fleet]);
      if (check.code === 3) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(check!.code).toBe(3);
    expect(check!.json().findings).toEqual([
      expect.objectContaining({ server: server.id, agent: "logs", reason: "failed", fix: "reissue" }),
    ]);
    const human = await hm(["check", "server-agents", "--fleet", fleet]);
    expect(human.stdout).toMatch(/failed\s+reg\/logs:1/);
    const clean = await hm(["check", "server-agents", "--fleet", (await fleetWithServer()).fleet]);
    expect(clean.code).toBe(0);
    expect(clean.stdout).toContain("no drift");

    expect((await hm(["servers", "decommission", server.id, "--force"])).code).toBe(2);
    const declined = await hm(["servers", "decommission", server.id], { stdin: "n\n" });
    expect(declined.code).toBe(1);
    expect((await api.getServer(server.id)).state).toBe("active");
    const done = await hm(["--json", "servers", "decommission", server.id], { stdin: "y\n" });
    expect(done.code).toBe(0);
    expect(done.json()).toMatchObject({ id: server.id, state: "decommissioning", desired: { lifecycle: "terminate" } });
  });

  it("login writes a 0600 config that later commands use; .dev.vars' ADMIN_TOKEN works with no setup", async () => {
    const config = join(home, "cfg", "config.json");
    const login = await hm(["login", "--url", url, "--token", admin], { auth: false, env: { HM_CONFIG: config } });
    expect(login.code).toBe(0);
    expect(statSync(config).mode & 0o777).toBe(0o600);
    expect(JSON.parse(readFileSync(config, "utf8"))).toEqual({
      current: "default",
      contexts: { default: { url, token: admin } },
    });
    expect((await hm(["fleets"], { auth: false, env: { HM_CONFIG: config } })).code).toBe(0);
    const refused = await hm(["login", "--url", url, "--token", "hmo.bad.bad"], {
      auth: false,
      env: { HM_CONFIG: join(home, "cfg2.json") },
    });
    expect(refused.code).toBe(1);

    const checkout = mkdtempSync(join(tmpdir(), "hm-checkout-"));
    writeFileSync(join(checkout, ".dev.vars"), `OTHER=1\nADMIN_TOKEN=${admin}\n`);
    const local = await hm(["--url", url, "--json", "fleets"], { auth: false, cwd: checkout });
    expect(local.code).toBe(0);
  });

  it("tokens, audit and upgrades", async () => {
    const created = await hm(["--json", "tokens", "create", "--name", "dash", "--scope", "read"]);
    expect(created.code).toBe(0);
    const t = created.json();
    expect(t).toMatchObject({ name: "dash", scope: "read", token: expect.stringMatching(/^hmo\./) });
    const list = await hm(["--json", "tokens"]);
    expect(list.json().some((x: { id: string }) => x.id === t.id)).toBe(true);
    expect((await hm(["tokens", "revoke", t.id])).code).toBe(1);
    expect((await hm(["--yes", "--json", "tokens", "revoke", t.id])).json()).toMatchObject({
      id: t.id,
      revoked_at: expect.any(String),
    });

    // --follow prints what happens while it runs, once each, oldest first, as JSON lines.
    const following = hm(["--json", "audit", "--follow", "--limit", "1", "--interval", "0.3", "--for", "2.5"]);
    await new Promise((r) => setTimeout(r, 700));
    const later = await api.createToken({ name: "followed", scope: "read" });
    const followed = await following;
    expect(followed.code).toBe(0);
    const lines = followed.stdout
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(lines.filter((e) => e.target === `token:${later.id}`).map((e) => e.action)).toEqual(["token.create"]);
    expect(lines.map((e) => e.id)).toEqual(lines.map((e) => e.id).sort((a, b) => a - b));

    // The other files' servers and rollouts share this server, and their outboxes may still be
    // delivering audit rows: each token's own entries, and their order.
    const createdEntries = (await hm(["--json", "audit", "--target", `token:${later.id}`, "--limit", "5"])).json();
    const revokedEntries = (await hm(["--json", "audit", "--target", `token:${t.id}`, "--limit", "5"])).json();
    expect(createdEntries[0]).toMatchObject({ action: "token.create", target: `token:${later.id}` });
    expect(revokedEntries[0]).toMatchObject({ action: "token.revoke", target: expect.stringContaining(t.id) });
    expect(createdEntries[0].id).toBeGreaterThan(revokedEntries[0].id);
    const upgrades = await hm(["--json", "upgrades"]);
    expect(upgrades.json()).toMatchObject({ state: "current", data_version: upgrades.json().newest_version });
  });

  it("runs as a program through the package's bin, with the same exit codes", () => {
    const bin = resolve(import.meta.dirname, "../bin/hm.mjs");
    const env = { ...process.env, HM_URL: url, HM_TOKEN: admin, HM_CONFIG: join(home, "none.json") };
    const ok = spawnSync(process.execPath, [bin, "--json", "fleets"], { env, encoding: "utf8" });
    expect(ok.status).toBe(0);
    expect(Array.isArray(JSON.parse(ok.stdout))).toBe(true);
    const notFound = spawnSync(process.execPath, [bin, "servers", "show", crypto.randomUUID()], {
      env,
      encoding: "utf8",
    });
    expect(notFound.status).toBe(1);
    expect(notFound.stderr).toContain("not_found");
    expect(spawnSync(process.execPath, [bin, "nope"], { env, encoding: "utf8" }).status).toBe(2);
  });
});

describe("hm check server-agents --fix", () => {
  it("shows the dry run and asks; declined changes nothing, --yes re-issues", async () => {
    const { fleet, server } = await fleetWithServer();
    expect((await hm(["--json", "desired", "set", server.id, "-f", agentsFile(["compute"])])).code).toBe(0);
    const desired = { data: await api.getDesired(server.id) };
    const host = await fetch(`${url}/v1/agent/inventory`, {
      method: "PUT",
      headers: { Authorization: `Bearer ${server.token}`, "Content-Type": "application/json" },
      body: JSON.stringify({
        generation: desired.data.generation,
        reconciled_at: new Date().toISOString(),
        boot_id: "b",
        agents: [{ name: "compute", image: "reg/compute:0", version: "0", instance_id: "c", state: "running" }],
      }),
    });
    expect(host.status).toBe(200);
    const found = await hm(["--json", "check", "server-agents", "--fleet", fleet]);
    expect(found.code).toBe(3);
    expect(found.json().findings).toMatchObject([
      {
        agent: "compute",
        reason: "image_mismatch",
        desired_image: "reg/compute:1",
        reported_image: "reg/compute:0",
        fix: "reissue",
      },
    ]);
    const declined = await hm(["check", "server-agents", "--fleet", fleet, "--fix"], { stdin: "n\n" });
    expect(declined.code).toBe(1);
    expect((await api.getDesired(server.id)).generation).toBe(desired.data.generation);
    const fixed = await hm(["--yes", "check", "server-agents", "--fleet", fleet, "--fix"]);
    expect(fixed.code).toBe(0);
    expect(fixed.stdout).toMatch(/reissued \(generation \d+\)/);
    const after = await hm(["--json", "check", "server-agents", "--fleet", fleet]);
    expect(after.json().findings.map((f: { reason: string }) => f.reason)).toEqual(["generation_behind"]);
  });

  it("prints each server's result and what was not fixed per fleet, and exits 1 when the budget refused one", async () => {
    const { fleet, server: a } = await fleetWithServer(`fa${n}.example.com`);
    const b = (
      await hm(["--json", "servers", "register", "--fleet", fleet, "--hostname", `fb${n}.example.com`])
    ).json() as { id: string; token: string };
    expect((await hm(["fleets", "patch", fleet, "--max-unavailable", "1"])).code).toBe(0);
    for (const s of [a, b]) {
      expect((await hm(["--json", "desired", "set", s.id, "-f", agentsFile(["compute"])])).code).toBe(0);
      const host = await fetch(`${url}/v1/agent/inventory`, {
        method: "PUT",
        headers: { Authorization: `Bearer ${s.token}`, "Content-Type": "application/json" },
        body: JSON.stringify({
          generation: (await api.getDesired(s.id)).generation,
          reconciled_at: new Date().toISOString(),
          boot_id: "b",
          agents: [{ name: "compute", image: "reg/compute:0", version: "0", instance_id: "c", state: "running" }],
        }),
      });
      expect(host.status).toBe(200);
    }
    // One unit of budget, two drifted servers: one is re-issued, the other refused naming the first.
    const fixed = await hm(["--yes", "check", "server-agents", "--fleet", fleet, "--fix"]);
    expect(fixed.code, fixed.stderr).toBe(1);
    expect(fixed.stdout).toMatch(/reissued \(generation \d+\)/);
    expect(fixed.stdout).toMatch(/refused: budget_exhausted \(.*f[ab]\d+\.example\.com/);
    expect(fixed.stdout).toContain(`${fleet}: 1 fixed, not fixed: 1 budget_exhausted`);
    expect(fixed.stderr).toContain("1 of 2 fix(es) not done");
  });
});
