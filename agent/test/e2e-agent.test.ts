/**
 * harbormaster-agent end to end: the built executable, run as a process against a private
 * server, as a host runs it.
 */
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { startLocalServer, type LocalServer } from "../../scripts/local-server.ts";
import { chmodSync, existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { StateDir } from "../cli/state.ts";
import { apiFor, Host, waitFor, type Api } from "./e2e-helpers.ts";

const executable = inject("agentExecutable");
const version = inject("agentVersion");
let server: LocalServer;
let api: Api;
const hosts: Host[] = [];

beforeAll(async () => {
  server = await startLocalServer({ label: "agent-e2e", parkTrustS: 2 });
  api = apiFor(server.url, server.admin);
}, 120_000);

afterAll(async () => {
  for (const h of hosts) await h.dispose();
  server?.stop();
});

const newHost = (...args: ConstructorParameters<typeof Host> extends [string, ...infer R] ? R : never) => {
  const h = new Host(executable, ...args);
  hosts.push(h);
  return h;
};

type Registered = {
  id: string;
  token: string;
  fleet: string;
  hostname: string;
  reboot_group: string;
  fleetlock_id: string | null;
};

async function registered(fleet: string, hostname: string, extra: Record<string, unknown> = {}): Promise<Registered> {
  if ((await api("GET", `/v1/fleets/${fleet}`)).status === 404)
    expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
  const r = await api("POST", "/v1/servers", { fleet, hostname, ...extra });
  expect(r.status, JSON.stringify(r.json)).toBe(201);
  return r.json as Registered;
}

/** The identity `join` keeps, for a server registered through the API (join itself: cli-join.test.ts). */
function joinedAs(host: Host, srv: Registered) {
  new StateDir(host.stateDir).write("identity.json", {
    url: server.url,
    server_id: srv.id,
    fleet: srv.fleet,
    hostname: srv.hostname,
    token: srv.token,
    reboot_group: srv.reboot_group,
    fleetlock_id: srv.fleetlock_id,
    machine_id: "m",
    joined_at: new Date().toISOString(),
  });
}

async function serverView(id: string) {
  return (await api("GET", `/v1/servers/${id}`)).json;
}

describe("harbormaster-agent, the built executable, against a private server", () => {
  it("reports itself as the agent harbormaster-agent, realized; a revoked token stops it (78) and it stays stopped", async () => {
    const fleet = "agent-self";
    const srv = await registered(fleet, "self-1.example.com");
    const host = newHost();
    joinedAs(host, srv);
    const put = await api("PUT", `/v1/servers/${srv.id}/desired`, {
      generation: 2,
      agents: [
        {
          name: "harbormaster-agent",
          image: "harbormaster-agent",
          version,
          instance_id: "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b",
        },
      ],
    });
    expect(put.status, JSON.stringify(put.json)).toBe(200);
    host.start();
    const shown = await waitFor("the server to show the agent realized", async () => {
      const s = (await api("GET", `/v1/servers/${srv.id}`)).json;
      return s.status === "realized" && s.reported_generation === 2 ? s : null;
    });
    expect(shown.agents).toEqual([
      expect.objectContaining({
        name: "harbormaster-agent",
        status: "realized",
        reported: expect.objectContaining({ version, state: "running" }),
      }),
    ]);
    const status = await host.cmd(["status", "--json"]);
    expect(JSON.parse(status.stdout)).toMatchObject({
      running: true,
      loop: { connected: true, transport: "channel", last_report: { generation: 2, status: "realized" } },
    });

    expect((await api("POST", `/v1/servers/${srv.id}/token`)).status).toBe(200);
    expect(await host.exited()).toBe(78);
    expect(host.log).toMatch(
      /<3>the server refused this host's token; stopping, and leaving every agent and its data as they are/,
    );
    await new Promise((r) => setTimeout(r, 1000));
    expect(host.running).toBe(false);
  });

  it("a reboot marker takes a FleetLock slot, runs the reboot command, and the slot is released on the healthy report after the boot", async () => {
    const fleet = "agent-reboot";
    expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
    const base = (await api("POST", `/v1/fleets/${fleet}/fleetlock-key`)).json.base_url as string;
    expect((await api("PUT", `/v1/fleets/${fleet}/reboot-groups/default`, { slots: 1 })).status).toBe(200);
    const srv = await registered(fleet, "reboot-1.example.com", { fleetlock_id: "reboot-1" });
    const host = newHost();
    const marker = join(host.root, "run/reboot-required");
    // The "reboot": a new boot id, the marker (in /run) gone, the agent killed as a reboot kills
    // it; the supervisor starts it again, as systemd does at boot.
    const reboot = join(host.root, "reboot.sh");
    writeFileSync(
      reboot,
      `#!/bin/sh\necho reboots >> ${host.root}/reboots\necho boot-2 > ${host.bootIdFile}\nrm -f ${marker}\nkill -KILL $PPID\n`,
    );
    chmodSync(reboot, 0o755);
    host.writeConfig({ reboot: { fleetlock_url: base, command: [reboot] } });
    joinedAs(host, srv);
    host.start();
    await waitFor("a first report", async () => (await serverView(srv.id)).reported_generation !== null);
    const group = async () => (await api("GET", `/v1/fleets/${fleet}/reboot-groups/default`)).json;
    expect((await group()).holders).toEqual([]);

    mkdirSync(join(host.root, "run"), { recursive: true });
    writeFileSync(marker, "*** System restart required ***\n");
    await waitFor("the reboot command to run", () => existsSync(join(host.root, "reboots")), 30_000);
    const during = await group();
    expect(during.holders.map((h: { id: string }) => h.id)).toEqual(["reboot-1"]);
    await waitFor("the slot to be released after the boot", async () => (await group()).holders.length === 0, 60_000);
    const after = await serverView(srv.id);
    expect(after.report.boot_id).toBe("boot-2");
    expect(host.log).toMatch(/<6>reboot: slot granted; rebooting/);
    // The server may free the slot on the healthy report itself (release_on), before the agent's
    // own steady-state call has answered and been logged.
    await waitFor(
      "the agent's steady-state call",
      () => /<6>reboot: healthy after the reboot; slot released/.test(host.log),
      15_000,
    );
    expect(new StateDir(host.stateDir).read("reboot.json")).toBe(null);
    // One reboot: the marker is gone with the boot.
    await new Promise((r) => setTimeout(r, 2000));
    expect((await import("node:fs")).readFileSync(join(host.root, "reboots"), "utf8")).toBe("reboots\n");
  });
});
