/**
 * What a kill -9 leaves behind between two steps (a state file written but not renamed, a
 * self-update's new build half written or half unpacked, a download for a config that has since
 * moved on, a tarball half unpacked) is gone once the restarted agent has run a pass; what is still
 * wanted (a partial download of the desired image) is kept, to be resumed.
 */
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { agentCmd, json, scriptedServer, tempHost } from "./cli-helpers.ts";

const hex = (c: string) => c.repeat(64);
const wanted = `sha256:${hex("a")}`;

const server = await scriptedServer((req, res) => {
  // A control plane that is down for this host: a trial run never gets its report accepted.
  if (req.headers.authorization === "Bearer hms.s.down")
    return json(res, 503, { error: { code: "unavailable", message: "down" } });
  if (req.url.startsWith("/v1/agent/desired"))
    return json(res, 200, {
      server_id: "s",
      generation: 1,
      // A terminate order: the pass runs (and prunes), reports, and the agent exits 0.
      lifecycle: "terminate",
      agents: [
        {
          name: "tool",
          image: "tool",
          version: "2",
          instance_id: "i-tool",
          image_id: "img-tool",
          kind: "tarball",
          digest: wanted,
          source: { blob: "/v1/agent/images/img-tool/blob" },
        },
      ],
    });
  if (req.url === "/v1/agent/inventory")
    return json(res, 200, { server_id: "s", desired_generation: 1, status: "realized", agents: [] });
  json(res, 404, { error: { code: "not_found", message: "no" } });
});
afterAll(() => server.close());

function joined(stateDir: string, token = "hms.s.t") {
  mkdirSync(stateDir, { recursive: true, mode: 0o700 });
  writeFileSync(
    join(stateDir, "identity.json"),
    JSON.stringify({
      url: server.url,
      server_id: "s",
      fleet: "f",
      hostname: "h",
      token,
      reboot_group: "default",
      fleetlock_id: null,
      machine_id: "m",
      joined_at: "",
    }),
  );
}

/** Running (a zombie nobody reaped yet, its parent gone, has ended). */
const alive = (pid: number) => {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
};

describe("a restarted agent", () => {
  it("removes what a killed run left and keeps the partial download still wanted", async () => {
    const host = tempHost("hm-leftovers");
    const state = host.stateDir;
    joined(state);
    const bin = join(host.root, "bin");
    mkdirSync(bin);
    const binary = join(bin, "harbormaster-agent");
    writeFileSync(binary, "#!/bin/sh\n");
    const agents = join(host.root, "opt", "harbormaster", "agents", "tool");
    mkdirSync(join(agents, "1"), { recursive: true });
    const images = join(state, "cache", "images");
    const self = join(state, "cache", "self");
    mkdirSync(images, { recursive: true });
    mkdirSync(self, { recursive: true });

    const debris = [
      join(state, "status.json.tmp-999999"),
      join(state, "reboot.json.tmp-1"),
      `${binary}.new`,
      join(bin, ".unpack-AbC123"),
      join(images, `sha256-${hex("b")}`),
      join(images, `sha256-${hex("c")}.partial`),
      join(self, `sha256-${hex("d")}.partial`),
      join(agents, ".unpack-0123abcd"),
      join(agents, ".current-89abcdef"),
    ];
    for (const p of debris) {
      if (/\.unpack-/.test(p)) mkdirSync(join(p, "bin"), { recursive: true });
      else writeFileSync(p, "half");
    }
    const kept = [join(images, `sha256-${hex("a")}.partial`), join(agents, "1"), join(state, "identity.json")];
    writeFileSync(kept[0], "resume me");

    const r = await agentCmd(["run"], {
      ...host.env,
      HARBORMASTER_AGENT_TRANSPORT: "http",
      HARBORMASTER_AGENT_ENGINE: join(host.root, "no-such-engine"),
      HARBORMASTER_AGENT_TARBALL_ROOT: host.root,
      HARBORMASTER_AGENT_BINARY: binary,
    });
    expect(debris.filter((p) => existsSync(p))).toEqual([]);
    expect(kept.filter((p) => !existsSync(p))).toEqual([]);
    expect(r.stderr + r.stdout).toMatch(/removed what an interrupted run left/);
    expect(r.code).toBe(0);
  });

  it("a self-update's trial run stops when the agent that started it is killed", async () => {
    const host = tempHost("hm-orphan");
    joined(host.stateDir, "hms.s.down");
    const root = resolve(import.meta.dirname, "../..");
    const err = join(host.root, "trial.log");
    const cmd = `HARBORMASTER_AGENT_TRIAL_PARENT=$$ "${join(root, "node_modules/node/bin/node")}" "${join(root, "agent/cli/main.ts")}" run --trial 2>"${err}" & echo $!; wait`;
    // The shell stands for the agent that started the trial; kill -9 it, as a crash would.
    const parent = spawn("sh", ["-c", cmd], {
      env: {
        ...process.env,
        ...host.env,
        HARBORMASTER_AGENT_TRANSPORT: "http",
        HARBORMASTER_AGENT_ENGINE: join(host.root, "no-such-engine"),
        HARBORMASTER_AGENT_TARBALL_ROOT: host.root,
        HARBORMASTER_AGENT_START_TIMEOUT_S: "60",
      },
      stdio: ["ignore", "pipe", "ignore"],
    });
    const trial = await new Promise<number>((ok) =>
      parent.stdout.once("data", (d: Buffer) => ok(Number(String(d).trim()))),
    );
    try {
      const t = Date.now();
      while (!/call failed/.test(existsSync(err) ? readFileSync(err, "utf8") : "") && Date.now() - t < 15_000)
        await new Promise((r) => setTimeout(r, 100));
      // Running its loop (and failing to report, the control plane being down).
      expect(readFileSync(err, "utf8")).toMatch(/trial run of this build/);
      expect(alive(trial)).toBe(true);
      parent.kill("SIGKILL");
      const t0 = Date.now();
      while (alive(trial) && Date.now() - t0 < 8_000) await new Promise((r) => setTimeout(r, 100));
      expect(alive(trial)).toBe(false);
      expect(readFileSync(err, "utf8")).toMatch(/the agent that started this trial is gone/);
    } finally {
      if (alive(trial)) process.kill(trial, "SIGKILL");
    }
  });

  it("a self-update's trial run whose pass waits on its engine ends at once when the agent that started it is killed", async () => {
    // The restarted agent runs 5 s later (the unit's RestartSec): a trial still in its pass then
    // (an engine command bounded at a minute, a load at ten) would drive the agents beside it.
    const host = tempHost("hm-orphan-pass");
    joined(host.stateDir);
    const root = resolve(import.meta.dirname, "../..");
    const err = join(host.root, "trial.log");
    const engine = join(host.root, "engine");
    const engineAt = join(host.root, "engine.pid");
    writeFileSync(
      engine,
      `#!/bin/sh\n[ "$1" = --version ] && { echo "podman version 5.0.0"; exit 0; }\necho $$ > "${engineAt}"\nexec sleep 120\n`,
      { mode: 0o755 },
    );
    const cmd = `HARBORMASTER_AGENT_TRIAL_PARENT=$$ "${join(root, "node_modules/node/bin/node")}" "${join(root, "agent/cli/main.ts")}" run --trial 2>"${err}" & echo $!; wait`;
    const parent = spawn("sh", ["-c", cmd], {
      env: {
        ...process.env,
        ...host.env,
        HARBORMASTER_AGENT_TRANSPORT: "http",
        HARBORMASTER_AGENT_ENGINE: engine,
        HARBORMASTER_AGENT_TARBALL_ROOT: host.root,
        HARBORMASTER_AGENT_START_TIMEOUT_S: "60",
      },
      stdio: ["ignore", "pipe", "ignore"],
    });
    const trial = await new Promise<number>((ok) =>
      parent.stdout.once("data", (d: Buffer) => ok(Number(String(d).trim()))),
    );
    try {
      const t = Date.now();
      while (!existsSync(engineAt) && Date.now() - t < 15_000) await new Promise((r) => setTimeout(r, 100));
      // In its pass, waiting on the engine.
      expect(existsSync(engineAt)).toBe(true);
      parent.kill("SIGKILL");
      const t0 = Date.now();
      while (alive(trial) && Date.now() - t0 < 5_000) await new Promise((r) => setTimeout(r, 100));
      expect(alive(trial)).toBe(false);
      expect(readFileSync(err, "utf8")).toMatch(/the agent that started this trial is gone/);
    } finally {
      if (alive(trial)) process.kill(trial, "SIGKILL");
      const hung = existsSync(engineAt) ? Number(readFileSync(engineAt, "utf8")) : 0;
      if (hung && alive(hung)) process.kill(hung, "SIGKILL");
    }
  });
});
