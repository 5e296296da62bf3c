/**
 * harbormaster-agent end to end: the built executable, run as a process against a private
 * server, as a host runs it.
 */
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { startLocalServer, type LocalServer } from "../../scripts/local-server.ts";
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
  for (const h of hosts) await h.stop();
  server?.stop();
});

const newHost = (...args: ConstructorParameters<typeof Host> extends [string, ...infer R] ? R : never) => {
  const h = new Host(executable, ...args);
  hosts.push(h);
  return h;
};

async function registered(fleet: string, hostname: string) {
  if ((await api("GET", `/v1/fleets/${fleet}`)).status === 404) expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
  const r = await api("POST", "/v1/servers", { fleet, hostname });
  expect(r.status, JSON.stringify(r.json)).toBe(201);
  return r.json as { id: string; token: string; fleet: string; hostname: string; reboot_group: string; fleetlock_id: string | null };
}

describe("harbormaster-agent, the built executable, against a private server", () => {
  it("reports itself as the agent harbormaster-agent, realized; a revoked token stops it (78) and it stays stopped", async () => {
    const fleet = "agent-self";
    const srv = await registered(fleet, "self-1.example.com");
    const host = newHost();
    // The identity join keeps (join itself: agent/test/cli-join.test.ts and the enrollment test).
    const { StateDir } = await import("../cli/state.ts");
    new StateDir(host.stateDir).write("identity.json", {
      url: server.url,
      server_id: srv.id,
      fleet,
      hostname: srv.hostname,
      token: srv.token,
      reboot_group: srv.reboot_group,
      fleetlock_id: srv.fleetlock_id,
      machine_id: "m",
      joined_at: new Date().toISOString(),
    });
    const put = await api("PUT", `/v1/servers/${srv.id}/desired`, {
      generation: 2,
      agents: [{ name: "harbormaster-agent", image: "harbormaster-agent", version, instance_id: "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b" }],
    });
    expect(put.status, JSON.stringify(put.json)).toBe(200);
    host.start();
    const shown = await waitFor("the server to show the agent realized", async () => {
      const s = (await api("GET", `/v1/servers/${srv.id}`)).json;
      return s.status === "realized" && s.reported_generation === 2 ? s : null;
    });
    expect(shown.agents).toEqual([
      expect.objectContaining({ name: "harbormaster-agent", status: "realized", reported: expect.objectContaining({ version, state: "running" }) }),
    ]);
    const status = await host.cmd(["status", "--json"]);
    expect(JSON.parse(status.stdout)).toMatchObject({ running: true, loop: { connected: true, transport: "channel", last_report: { generation: 2, status: "realized" } } });

    expect((await api("POST", `/v1/servers/${srv.id}/token`)).status).toBe(200);
    expect(await host.exited()).toBe(78);
    expect(host.log).toMatch(/<3>the server refused this host's token; stopping, and leaving every agent and its data as they are/);
    await new Promise((r) => setTimeout(r, 1000));
    expect(host.running).toBe(false);
  });
});
