/**
 * harbormaster-agent end to end with the image catalog: images pushed with `hm images push`,
 * downloaded by the built agent with its server token and checked against their digest, run as
 * podman containers or tarballs with hooks; and the agent updating itself from a pushed build.
 */
import { createHash, randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { main as hmMain } from "../../cli/main.ts";
import { buildAgent } from "../../scripts/agent/build.ts";
import { startLocalServer, type LocalServer } from "../../scripts/local-server.ts";
import { StateDir, type Identity } from "../cli/state.ts";
import { apiFor, cleanPodman, containersOf, Host, waitFor, type Api } from "./e2e-helpers.ts";
import { buildImage, cleanPodman as cleanImages, sh } from "./helpers.ts";

const executable = inject("agentExecutable");
const version = inject("agentVersion");
const scope = `hmcat${randomBytes(3).toString("hex")}`;
let server: LocalServer;
let api: Api;
const hosts: Host[] = [];
const scopes: string[] = [];
const work = join(tmpdir(), `hm-e2e-catalog-${scope}`);
mkdirSync(work, { recursive: true });

beforeAll(async () => {
  server = await startLocalServer({ label: "agent-catalog", parkTrustS: 2 });
  api = apiFor(server.url, server.admin);
}, 120_000);

afterAll(async () => {
  for (const h of hosts) await h.dispose();
  server?.stop();
  for (const s of scopes) cleanPodman(s, []);
  cleanPodman(scope, []);
  // The images the agents loaded (named after this file's scope).
  await cleanImages(scope);
  rmSync(work, { recursive: true, force: true });
});

/** `hm` in-process against the private server, as an operator runs it. */
async function hm(args: string[]) {
  let stdout = "";
  let stderr = "";
  const code = await hmMain(args, {
    stdout: (s) => void (stdout += s),
    stderr: (s) => void (stderr += s),
    stdin: Readable.from([]),
    interactive: false,
    env: { HM_CONFIG: join(work, "no-config.json"), HM_URL: server.url, HM_TOKEN: server.admin },
    cwd: work,
  });
  return { code, stdout, stderr };
}

/** Pushes FILE as NAME VERSION; answers the catalog image. */
async function push(name: string, v: string, file: string, kind: "oci-archive" | "tarball" = "oci-archive") {
  const r = await hm(["--json", "images", "push", name, v, file, "--kind", kind]);
  expect(r.code, r.stderr).toBe(0);
  const img = JSON.parse(r.stdout) as { id: string; digest: string; size: number; state: string };
  expect(img.state).toBe("ready");
  expect(img.digest).toBe(`sha256:${createHash("sha256").update(readFileSync(file)).digest("hex")}`);
  return img;
}

/** A host registered in `fleet` with the identity `join` keeps (join itself: cli-join.test.ts), in a scope of its own. */
async function joinedHost(fleet: string, hostname: string, config: Record<string, unknown> = {}, exe = executable) {
  if ((await api("GET", `/v1/fleets/${fleet}`)).status === 404)
    expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
  const r = await api("POST", "/v1/servers", { fleet, hostname });
  expect(r.status, JSON.stringify(r.json)).toBe(201);
  const hostScope = `${scope}-${hostname.split(".")[0]}`;
  scopes.push(hostScope);
  const host = new Host(exe, { config: { podman: { name_prefix: `${hostScope}-`, scope: hostScope }, ...config } });
  hosts.push(host);
  new StateDir(host.stateDir).write("identity.json", {
    url: server.url,
    server_id: r.json.id,
    fleet,
    hostname,
    token: r.json.token,
    reboot_group: "default",
    fleetlock_id: null,
    machine_id: hostScope,
    joined_at: new Date().toISOString(),
  } satisfies Identity);
  return { host, id: r.json.id as string, scope: hostScope };
}

const view = async (id: string) => (await api("GET", `/v1/servers/${id}`)).json;
let generation = 10;
async function desire(id: string, agents: object[]) {
  const r = await api("PUT", `/v1/servers/${id}/desired`, { generation: ++generation, agents });
  expect(r.status, JSON.stringify(r.json)).toBe(200);
  return generation;
}
const until = (what: string, id: string, ok: (s: any) => boolean, ms = 90_000) =>
  waitFor(
    what,
    async () => {
      const s = await view(id);
      return ok(s) ? s : null;
    },
    ms,
  );

describe("harbormaster-agent with the image catalog", () => {
  it("runs an image pushed with hm images push; a corrupted download is a report error and nothing starts", async () => {
    const v1 = await buildImage({ ref: `localhost/${scope}-api:1`, cmd: ["sleep", "1000000"] });
    const v2 = await buildImage({ ref: `localhost/${scope}-api:2`, cmd: ["sleep", "1000000"] });
    writeFileSync(join(work, "api-1.tar"), v1.archive);
    writeFileSync(join(work, "api-2.tar"), v2.archive);
    const img1 = await push("api", "1", join(work, "api-1.tar"));
    const img2 = await push("api", "2", join(work, "api-2.tar"));
    const { host, id, scope: s } = await joinedHost("catalog", "cat-1.example.com");
    const gen = await desire(id, [{ name: "api", image_id: img1.id }]);
    host.start();
    const shown = await until("realized", id, (v) => v.status === "realized" && v.reported_generation === gen);
    expect(shown.agents[0]).toMatchObject({
      name: "api",
      status: "realized",
      reported: { image: "api", version: "1", state: "running" },
    });
    const [c] = containersOf(s);
    expect(c.Labels).toMatchObject({
      "io.harbormaster.agent": "api",
      "io.harbormaster.image-id": img1.id,
      "io.harbormaster.version": "1",
    });

    // The stored bytes of version 2 rot in the bucket (the local R2's blob file, flipped).
    const blobs = join(server.persist, "v3", "r2");
    const files = (function walk(d: string): string[] {
      return readdirSync(d, { withFileTypes: true }).flatMap((e) =>
        e.isDirectory() ? walk(join(d, e.name)) : [join(d, e.name)],
      );
    })(blobs).filter((f) => statSync(f).size === img2.size);
    expect(files.length).toBeGreaterThan(0);
    for (const f of files) {
      const b = readFileSync(f);
      b[Math.floor(b.length / 2)] ^= 0xff;
      writeFileSync(f, b);
    }
    const gen2 = await desire(id, [{ name: "api", image_id: img2.id }]);
    const failed = await until(
      "the update to fail",
      id,
      (v) => v.reported_generation === gen2 && v.status === "failed",
    );
    expect(failed.agents[0].errors[0]).toMatchObject({
      op: "update",
      message: expect.stringMatching(/does not match its digest/),
    });
    // Nothing of version 2 started: version 1 runs on, alone.
    expect(containersOf(s).map((x) => [x.Labels["io.harbormaster.version"], x.State])).toEqual([["1", "running"]]);
  });

  it("a tarball agent with hooks installs, updates, is started again when killed by hand, and is removed", async () => {
    const tgz = (v: string) => {
      const dir = join(work, `tb-${v}`);
      mkdirSync(join(dir, "bin"), { recursive: true });
      const hooks: Record<string, string> = {
        install: `#!/bin/sh\necho "install $HM_AGENT_VERSION" >> "$HM_DATA_DIR/log"\n`,
        start: `#!/bin/sh\n[ -f "$HM_DATA_DIR/pid" ] && kill -0 "$(cat "$HM_DATA_DIR/pid")" 2>/dev/null && exit 0\nsetsid sleep 1000000 </dev/null >/dev/null 2>&1 &\necho $! > "$HM_DATA_DIR/pid"\n`,
        stop: `#!/bin/sh\n[ -f "$HM_DATA_DIR/pid" ] && kill "$(cat "$HM_DATA_DIR/pid")" 2>/dev/null\nrm -f "$HM_DATA_DIR/pid"\n`,
        status: `#!/bin/sh\n[ -f "$HM_DATA_DIR/pid" ] && kill -0 "$(cat "$HM_DATA_DIR/pid")" 2>/dev/null && exit 0\nexit 3\n`,
        remove: `#!/bin/sh\nexit 0\n`,
      };
      for (const [h, text] of Object.entries(hooks)) {
        writeFileSync(join(dir, "bin", h), text);
        chmodSync(join(dir, "bin", h), 0o755);
      }
      writeFileSync(
        join(dir, "manifest.json"),
        JSON.stringify({
          name: "meter",
          version: v,
          hooks: Object.fromEntries(Object.keys(hooks).map((h) => [h, `bin/${h}`])),
        }),
      );
      const out = join(work, `meter-${v}.tgz`);
      return sh("tar", ["-czf", out, "-C", dir, "."]).then(() => out);
    };
    const m1 = await push("meter", "1", await tgz("1"), "tarball");
    const m2 = await push("meter", "2", await tgz("2"), "tarball");
    const root = join(work, "tarball-root");
    const { host, id } = await joinedHost("catalog", "cat-2.example.com", { tarball: { root } });
    const agents = join(root, "opt/harbormaster/agents/meter");
    const gen = await desire(id, [{ name: "meter", image_id: m1.id }]);
    host.start();
    await until("the tarball agent realized", id, (v) => v.status === "realized" && v.reported_generation === gen);
    expect(existsSync(join(agents, "1", "manifest.json"))).toBe(true);
    const gen2 = await desire(id, [{ name: "meter", image_id: m2.id }]);
    const up = await until("version 2 realized", id, (v) => v.status === "realized" && v.reported_generation === gen2);
    expect(up.agents[0].reported).toMatchObject({ version: "2", state: "running" });
    expect(readFileSync(join(agents, "data", "log"), "utf8")).toMatch(/install 1\ninstall 2/);
    // Its process killed by hand: the status hook says so, and the next pass starts it again.
    const pid = Number(readFileSync(join(agents, "data", "pid"), "utf8"));
    process.kill(pid, "SIGKILL");
    await waitFor(
      "the tarball agent started again",
      () => {
        const now = Number(readFileSync(join(agents, "data", "pid"), "utf8"));
        return now !== pid && existsSync(`/proc/${now}`);
      },
      30_000,
    );
    const gen3 = await desire(id, []);
    await until(
      "removed",
      id,
      (v) => v.status === "realized" && v.reported_generation === gen3 && v.agents.length === 0,
    );
    await host.stop();
  });

  it("the agent updates itself from a pushed build, and falls back when the new build cannot start", async () => {
    const next = await buildAgent({
      version: `${version}-e2e.2`,
      outDir: join(work, "build-2"),
      deb: false,
      log: () => {},
    });
    const a2 = await push("harbormaster-agent", next.version, next.binary, "tarball");
    const { host, id } = await joinedHost("catalog", "cat-3.example.com");
    host.start();
    await until("a first report", id, (v) => v.reported_generation !== null);
    const gen = await desire(id, [{ name: "harbormaster-agent", image_id: a2.id }]);
    // The trial run reports first; then the swap, the exit (75) and the new build's own start.
    await waitFor("the agent to restart into the new build", () => host.exits.includes(75) && host.running, 180_000);
    const updated = await until(
      "the new build realized",
      id,
      (v) =>
        v.status === "realized" && v.reported_generation === gen && v.agents[0]?.reported?.version === next.version,
    );
    expect(updated.agents[0].reported).toMatchObject({ version: next.version, state: "running" });
    await waitFor(
      "the new build to confirm itself",
      () => !existsSync(join(host.stateDir, "self-update.json")),
      30_000,
    );
    expect(createHash("sha256").update(readFileSync(host.binary)).digest("hex")).toBe(next.sha256);
    expect(readFileSync(`${host.binary}.previous`).equals(readFileSync(executable))).toBe(true);
    const st = await host.cmd(["status", "--json"]);
    expect(JSON.parse(st.stdout)).toMatchObject({
      running: true,
      loop: { version: next.version },
      self_update: { in_progress: null },
    });

    // A build that cannot start: it never replaces the running one, and the report says why.
    const broken = join(work, "broken-agent");
    writeFileSync(broken, "#!/bin/sh\necho 'cannot open /etc/harbormaster-agent: Permission denied' >&2\nexit 1\n");
    const a3 = await push("harbormaster-agent", `${version}-e2e.3`, broken, "tarball");
    const gen3 = await desire(id, [{ name: "harbormaster-agent", image_id: a3.id }]);
    const failed = await until(
      "the broken build refused",
      id,
      (v) => v.reported_generation === gen3 && v.status === "failed",
      120_000,
    );
    expect(failed.agents[0]).toMatchObject({ status: "failed", reported: { version: next.version } });
    expect(failed.agents[0].errors[0].message).toMatch(
      /did not start: exited with 1: cannot open \/etc\/harbormaster-agent: Permission denied; still running/,
    );
    expect(createHash("sha256").update(readFileSync(host.binary)).digest("hex")).toBe(next.sha256);
    expect(host.running).toBe(true);
  });
});
