/**
 * harbormaster-agent end to end with real podman containers: the built executable joins with an
 * enrollment token and runs agents
 * whose images are in the machine's podman store (free-form image references, as fleets without
 * the image catalog name them), against a private server.
 */
import { randomBytes, randomUUID } from "node:crypto";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { Readable } from "node:stream";
import { main as hmMain } from "../../cli/main.ts";
import { startLocalServer, type LocalServer } from "../../scripts/local-server.ts";
import { StateDir, type Identity } from "../cli/state.ts";
import {
  apiFor,
  cleanPodman,
  containersOf,
  Host,
  localImage,
  podman,
  volumesOf,
  waitFor,
  type Api,
} from "./e2e-helpers.ts";

const executable = inject("agentExecutable");
const scope = `hme2e${randomBytes(3).toString("hex")}`;
const image = (v: number) => `localhost/${scope}-web:${v}`;
// Writes to its volume; exits at once (a crash loop) while /data/poison exists.
const CMD = ["sh", "-c", "test -f /data/poison && exit 3; date >> /data/starts; exec sleep 1000000"];
let server: LocalServer;
let api: Api;
const hosts: Host[] = [];
const scopes: string[] = [];

beforeAll(async () => {
  localImage(image(1), CMD, ["/data"]);
  localImage(image(2), CMD, ["/data"]);
  server = await startLocalServer({ label: "agent-containers", parkTrustS: 2 });
  api = apiFor(server.url, server.admin);
}, 180_000);

afterAll(async () => {
  for (const h of hosts) await h.dispose();
  server?.stop();
  for (const s of scopes) cleanPodman(s, []);
  cleanPodman(scope, [image(1), image(2)]);
});

async function enrollmentToken(fleet: string, kind: "managed" | "manual", roles: string[]) {
  if ((await api("GET", `/v1/fleets/${fleet}`)).status === 404)
    expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
  const r = await api("POST", `/v1/fleets/${fleet}/enrollment-tokens`, {
    expires_at: new Date(Date.now() + 3600_000).toISOString(),
    max_uses: 5,
    kind,
    roles,
  });
  expect(r.status, JSON.stringify(r.json)).toBe(201);
  return r.json.token as string;
}

/**
 * A host that joined `fleet` with an enrollment token (`harbormaster-agent join`), its containers
 * in a scope of its own: the driver tells one agent's containers and volumes from another's on a
 * shared engine by it, as two hosts would be two engines.
 */
async function joinedHost(
  fleet: string,
  hostname: string,
  kind: "managed" | "manual" = "managed",
  roles: string[] = [],
) {
  const hostScope = `${scope}-${hostname.split(".")[0]}`;
  scopes.push(hostScope);
  const host = new Host(executable, { config: { podman: { name_prefix: `${hostScope}-`, scope: hostScope } } });
  hosts.push(host);
  const token = await enrollmentToken(fleet, kind, roles);
  const joined = await host.cmd(["join", server.url, token, "--hostname", hostname]);
  expect(joined.code, joined.stderr).toBe(0);
  expect(joined.stdout).toMatch(new RegExp(`joined fleet ${fleet} as ${hostname.replace(/\./g, "\\.")}`));
  const again = await host.cmd(["join", server.url, token]);
  expect(again.stdout).toMatch(/already joined/);
  const id = (new StateDir(host.stateDir).identity() as Identity).server_id;
  /** The join retried from the same machine with its token (its first answer lost): the same server, a fresh token. */
  const rejoin = async () => {
    new StateDir(host.stateDir).remove("identity.json");
    const r = await host.cmd(["join", server.url, token, "--hostname", hostname]);
    expect(r.code, r.stderr).toBe(0);
    expect(new StateDir(host.stateDir).identity()!.server_id).toBe(id);
  };
  return { host, id, name: `${hostScope}-web`, scope: hostScope, rejoin };
}

const view = async (id: string) => (await api("GET", `/v1/servers/${id}`)).json;
let generation = 10;
const desire = async (id: string, agents: { name: string; image: string; version: string; instance_id: string }[]) => {
  const r = await api("PUT", `/v1/servers/${id}/desired`, { generation: ++generation, agents });
  expect(r.status, JSON.stringify(r.json)).toBe(200);
  return generation;
};
const realizedAt = (id: string, gen: number) =>
  waitFor(
    `server ${id} realized at generation ${gen}`,
    async () => {
      const s = await view(id);
      return s.status === "realized" && s.reported_generation === gen ? s : null;
    },
    90_000,
  );

describe("harbormaster-agent with podman", () => {
  const instance = randomUUID();

  it("runs the container; the server shows realized with what podman says; version 2 replaces it; a container killed by hand shows in the report and the drift check", async () => {
    const { host, id, name, scope } = await joinedHost("agent-pods", "pod-1.example.com");
    const gen = await desire(id, [{ name: "web", image: image(1), version: "1", instance_id: instance }]);
    host.start();
    const s = await realizedAt(id, gen);
    const [c] = containersOf(scope).filter((x) => x.Names.includes(name));
    expect(c.State).toBe("running");
    expect(c.Labels).toMatchObject({
      "io.harbormaster.agent": "web",
      "io.harbormaster.instance": instance,
      "io.harbormaster.image": image(1),
      "io.harbormaster.version": "1",
    });
    expect(s.agents).toEqual([
      expect.objectContaining({
        name: "web",
        status: "realized",
        reported: { image: image(1), version: "1", instance_id: instance, state: "running" },
      }),
    ]);

    const gen2 = await desire(id, [{ name: "web", image: image(2), version: "2", instance_id: instance }]);
    const s2 = await realizedAt(id, gen2);
    const [c2] = containersOf(scope).filter((x) => x.Names.includes(name));
    expect(c2.Id).not.toBe(c.Id);
    expect(c2.Labels["io.harbormaster.version"]).toBe("2");
    expect(s2.agents[0].reported).toEqual({ image: image(2), version: "2", instance_id: instance, state: "running" });
    // The old container is gone, not kept beside the new one.
    expect(containersOf(scope).map((x) => x.Names)).toEqual([[name]]);

    // Killed by hand, and crash-looping since (its volume says so): the next report says the
    // container failed, with podman's reason, and so does the drift check.
    podman("exec", name, "touch", "/data/poison");
    podman("kill", name);
    const failed = await waitFor("the report to show the container failed", async () => {
      const v = await view(id);
      return v.status === "failed" ? v : null;
    });
    expect(failed.agents[0].errors[0].message).toMatch(/exited with code 3/);
    const check = (await api("GET", `/v1/check/server-agents?fleet=agent-pods`)).json;
    expect(check.findings).toEqual([expect.objectContaining({ server: id, agent: "web", reason: "failed" })]);
    // Fixed on the machine: the next pass starts it again.
    const [volume] = volumesOf(scope);
    rmSync(join(JSON.parse(podman("volume", "inspect", volume))[0].Mountpoint as string, "poison"));
    await waitFor("realized again", async () => (await view(id)).status === "realized", 60_000);
    await host.stop();
  });

  it("a rollout to version 2 with hm rollout start replaces the container and succeeds", async () => {
    const fleet = "agent-rollout";
    expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
    expect((await api("PUT", `/v1/fleets/${fleet}/channels/web`, { image: image(1), version: "1" })).status).toBe(200);
    expect((await api("PUT", `/v1/fleets/${fleet}/roles/front`, { agents: [{ name: "web" }] })).status).toBe(200);
    const { host, id, name, scope } = await joinedHost(fleet, "ro-1.example.com", "managed", ["front"]);
    host.start();
    // The planner gives the server its role's agents: version 1 from the channel.
    await waitFor(
      "version 1 realized",
      async () => {
        const v = await view(id);
        return v.status === "realized" && v.agents[0]?.reported?.version === "1";
      },
      90_000,
    );
    const before = containersOf(scope).find((x) => x.Names.includes(name))!;
    let stdout = "";
    let stderr = "";
    const code = await hmMain(
      [
        "--json",
        "rollout",
        "start",
        "--fleet",
        fleet,
        "--agent",
        "web",
        "--image",
        image(2),
        "--version",
        "2",
        "--watch",
        "--timeout",
        "120",
      ],
      {
        stdout: (t) => void (stdout += t),
        stderr: (t) => void (stderr += t),
        stdin: Readable.from([]),
        interactive: false,
        env: { HM_CONFIG: join(host.root, "no-hm-config.json"), HM_URL: server.url, HM_TOKEN: server.admin },
        cwd: host.root,
      },
    );
    expect(code, `${stdout}\n${stderr}`).toBe(0);
    const rollouts = (await api("GET", `/v1/rollouts?fleet=${fleet}`)).json.items as { state: string }[];
    expect(rollouts.map((r) => r.state)).toEqual(["succeeded"]);
    const after = containersOf(scope).find((x) => x.Names.includes(name))!;
    expect(after.Id).not.toBe(before.Id);
    expect(after).toMatchObject({
      State: "running",
      Labels: expect.objectContaining({ "io.harbormaster.version": "2", "io.harbormaster.image": image(2) }),
    });
    expect((await view(id)).agents[0]).toMatchObject({
      status: "realized",
      reported: { version: "2", image: image(2) },
    });
    await host.stop();
  });

  it("terminate stops the container and keeps its volume; revoking the token leaves everything as it was", async () => {
    const { host, id, name, scope, rejoin } = await joinedHost("agent-pods", "pod-2.example.com");
    const gen = await desire(id, [{ name: "web", image: image(1), version: "1", instance_id: randomUUID() }]);
    host.start();
    await realizedAt(id, gen);
    const before = containersOf(scope).find((x) => x.Names.includes(name))!;
    const volumes = before.Mounts ?? [];
    expect((await api("POST", `/v1/servers/${id}/token`)).status).toBe(200);
    expect(await host.exited()).toBe(78);
    const after = containersOf(scope).find((x) => x.Names.includes(name))!;
    expect(after).toMatchObject({ Id: before.Id, State: "running" });
    expect(after.Mounts ?? []).toEqual(volumes);

    // Joined again (the enrollment retried from the same machine: the same server, a new token),
    // the agent comes back and finds its container as it left it.
    await rejoin();
    host.start();
    expect((await api("POST", `/v1/servers/${id}/decommission`, {})).status).toBe(200);
    expect(await host.exited()).toBe(0);
    expect(host.log).toMatch(/terminated: every agent is stopped, its data kept/);
    const stopped = containersOf(scope).find((x) => x.Names.includes(name))!;
    expect(stopped.State).toMatch(/exited|stopped/);
    expect(volumesOf(scope).length).toBeGreaterThan(0);
  });

  it("uninstall removes the container and its volume", async () => {
    const { host, id, name, scope } = await joinedHost("agent-pods", "pod-3.example.com", "manual");
    const gen = await desire(id, [{ name: "web", image: image(1), version: "1", instance_id: randomUUID() }]);
    host.start();
    await realizedAt(id, gen);
    const mounts = (containersOf(scope).find((x) => x.Names.includes(name))!.Mounts ?? []).length;
    expect(mounts).toBeGreaterThan(0);
    expect(volumesOf(scope)).toHaveLength(1);
    expect((await api("POST", `/v1/servers/${id}/decommission`, {})).status).toBe(200);
    expect(await host.exited()).toBe(0);
    expect(host.log).toMatch(/uninstalled: every agent is removed/);
    expect(containersOf(scope).find((x) => x.Names.includes(name))).toBeUndefined();
    expect(volumesOf(scope)).toEqual([]);
  });
});
