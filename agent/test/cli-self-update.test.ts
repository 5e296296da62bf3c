import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import type { DesiredConfig } from "../../src/model/server/schemas.ts";
import { createLogger } from "../cli/log.ts";
import { checkSwapOnStart, SelfDriver, type FailedBuild, type SwapMarker } from "../cli/self-update.ts";
import { StateDir, type Identity } from "../cli/state.ts";
import { AGENT_VERSION } from "../cli/version.ts";
import { scriptedServer, tempHost } from "./cli-helpers.ts";

/** A "build": a script that passes its trial run (exit 0) or cannot start (exit 1, saying why). */
const build = (starts: boolean, tag: string) =>
  Buffer.from(
    starts
      ? `#!/bin/sh\n# ${tag}\nexit 0\n`
      : `#!/bin/sh\n# ${tag}\necho "cannot load its configuration" >&2\nexit 1\n`,
  );
const digestOf = (b: Buffer) => `sha256:${createHash("sha256").update(b).digest("hex")}`;

const blobs = new Map<string, Buffer>();
const server = await scriptedServer((req, res) => {
  const b = req.headers.authorization === "Bearer hms.s.t" ? blobs.get(req.url) : undefined;
  if (!b) {
    res.writeHead(404, { "Content-Type": "application/json" });
    return res.end('{"error":{"code":"image_not_found","message":"no such image"}}');
  }
  res.writeHead(200, { "Content-Length": b.length });
  res.end(b);
});
afterAll(() => server.close());

function setup() {
  const host = tempHost("hm-self");
  const state = new StateDir(host.stateDir);
  state.ensure();
  const bin = join(host.root, "bin");
  mkdirSync(bin);
  const binary = join(bin, "harbormaster-agent");
  writeFileSync(binary, "#!/bin/sh\n# the running build\n");
  chmodSync(binary, 0o755);
  const identity: Identity = {
    url: server.url,
    server_id: "s",
    fleet: "f",
    hostname: "h",
    token: "hms.s.t",
    reboot_group: "default",
    fleetlock_id: null,
    machine_id: "m",
    joined_at: "",
  };
  let restarts = 0;
  const lines: string[] = [];
  const log = createLogger({ level: "debug", tty: false, write: (l) => lines.push(l) });
  const driver = new SelfDriver({
    state,
    identity,
    binary,
    trialArgs: [],
    startTimeoutS: 20,
    log,
    onRestart: () => restarts++,
  });
  return { host, state, binary, driver, lines, log, restarts: () => restarts };
}

function serve(name: string, bytes: Buffer) {
  blobs.set(`/v1/agent/images/${name}/blob`, bytes);
  return {
    digest: digestOf(bytes),
    source: { blob: `/v1/agent/images/${name}/blob` },
    kind: "tarball" as const,
    image_id: name,
  };
}

const desired = (agents: DesiredConfig["agents"], lifecycle: DesiredConfig["lifecycle"] = "run"): DesiredConfig => ({
  server_id: "s",
  generation: 3,
  agents,
  lifecycle,
});
const selfSpec = <C extends object>(version: string, catalog: C) => ({
  name: "harbormaster-agent",
  image: "harbormaster-agent",
  version,
  instance_id: "i-self",
  ...catalog,
});
const current = {
  name: "harbormaster-agent",
  image: "harbormaster-agent",
  version: AGENT_VERSION,
  instance_id: "i-self",
  state: "running" as const,
};

describe("the agent as an agent", () => {
  it("reports itself, with its own version, only while the desired config names it", async () => {
    const t = setup();
    await t.driver.beforePass(desired([]));
    expect(await t.driver.list()).toEqual([]);
    await t.driver.beforePass(desired([selfSpec("9.9.9", {})]));
    expect(await t.driver.list()).toEqual([current]);
    await t.driver.beforePass(desired([selfSpec("9.9.9", {})], "terminate"));
    expect(await t.driver.list()).toEqual([]);
  });

  it("swaps in a build that passes its trial run, keeping the running one as .previous, and asks for a restart", async () => {
    const t = setup();
    const next = build(true, "v2");
    await t.driver.update(current, selfSpec("2.0.0", serve("v2", next)));
    expect(readFileSync(t.binary)).toEqual(next);
    expect(readFileSync(`${t.binary}.previous`, "utf8")).toContain("the running build");
    expect(t.state.read<SwapMarker>("self-update.json")).toMatchObject({
      from: AGENT_VERSION,
      to: "2.0.0",
      binary: t.binary,
      starts: 0,
    });
    expect(t.restarts()).toBe(1);
  });

  it("unpacks the executable from a tar.gz build", async () => {
    const t = setup();
    const dir = join(t.host.root, "pack");
    mkdirSync(dir);
    writeFileSync(join(dir, "harbormaster-agent"), build(true, "from a tarball"), { mode: 0o755 });
    spawnSync("tar", ["-czf", join(t.host.root, "b.tgz"), "-C", dir, "harbormaster-agent"]);
    await t.driver.update(current, selfSpec("2.1.0", serve("tgz", readFileSync(join(t.host.root, "b.tgz")))));
    expect(readFileSync(t.binary, "utf8")).toContain("from a tarball");
  });

  it("a download that does not match its digest is an error and nothing is swapped", async () => {
    const t = setup();
    const spec = selfSpec("2.0.0", serve("bad", build(true, "good")));
    blobs.set(spec.source.blob, build(true, "tampered"));
    await expect(t.driver.update(current, spec)).rejects.toThrow(/does not match its digest/);
    expect(readFileSync(t.binary, "utf8")).toContain("the running build");
    expect(existsSync(`${t.binary}.new`) || existsSync(`${t.binary}.previous`)).toBe(false);
    expect(t.state.read("self-update.json")).toBe(null);
    expect(t.restarts()).toBe(0);
  });

  it("a build that cannot start never replaces the running one, says why, and is not tried again", async () => {
    const t = setup();
    const spec = selfSpec("3.0.0", serve("broken", build(false, "v3")));
    await expect(t.driver.update(current, spec)).rejects.toThrow(
      /build 3.0.0 did not start: exited with 1: cannot load its configuration; still running/,
    );
    expect(readFileSync(t.binary, "utf8")).toContain("the running build");
    expect(t.state.read<FailedBuild>("self-update-failed.json")).toMatchObject({
      version: "3.0.0",
      digest: spec.digest,
    });
    const asked = server.requests.length;
    await expect(t.driver.update(current, spec)).rejects.toThrow(/not trying it again/);
    expect(server.requests.length).toBe(asked);
    expect(t.restarts()).toBe(0);
  });

  it("a swapped build confirms on its first report; one started too often without reporting falls back to .previous", async () => {
    const t = setup();
    await t.driver.update(current, selfSpec("2.0.0", serve("v2b", build(true, "v2b"))));
    const first = checkSwapOnStart(t.state, t.log, "2.0.0");
    expect(first.kind).toBe("trial");
    expect(t.state.read<SwapMarker>("self-update.json")!.starts).toBe(1);
    checkSwapOnStart(t.state, t.log, "2.0.0");
    checkSwapOnStart(t.state, t.log, "2.0.0");
    const fourth = checkSwapOnStart(t.state, t.log, "2.0.0");
    expect(fourth.kind).toBe("rolled_back");
    expect(readFileSync(t.binary, "utf8")).toContain("the running build");
    expect(t.state.read("self-update.json")).toBe(null);
    expect(t.state.read<FailedBuild>("self-update-failed.json")).toMatchObject({
      version: "2.0.0",
      reason: "started 3 times without a report accepted",
    });

    const u = setup();
    await u.driver.update(current, selfSpec("2.0.0", serve("v2c", build(true, "v2c"))));
    const ok = checkSwapOnStart(u.state, u.log, "2.0.0");
    if (ok.kind !== "trial") throw new Error(ok.kind);
    ok.confirm();
    expect(u.state.read("self-update.json")).toBe(null);
    expect(checkSwapOnStart(u.state, u.log, "2.0.0").kind).toBe("none");
  });

  it("an old build that finds the marker (the swap never happened) clears it and runs on", async () => {
    const t = setup();
    t.state.write("self-update.json", {
      from: "1.0.0",
      to: "2.0.0",
      digest: "sha256:x",
      binary: t.binary,
      previous: `${t.binary}.previous`,
      swapped_at: "",
      starts: 0,
    });
    writeFileSync(`${t.binary}.new`, "half");
    expect(checkSwapOnStart(t.state, t.log, "1.0.0").kind).toBe("not_swapped");
    expect(t.state.read("self-update.json")).toBe(null);
    expect(existsSync(`${t.binary}.new`)).toBe(false);
  });
});
