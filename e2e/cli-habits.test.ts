/**
 * hm as operators from kubectl, juju and sdcadm expect it (docs/operator-guide.md): servers named by hostname,
 * the daily API in commands, -o table|wide|json|yaml with --no-headers, --version, completion,
 * contexts, durations with units, relative times, status in one request with "and N more", a
 * closed pipe that ends quietly, and messages that say what is wrong.
 */
import { execFile, spawn, spawnSync } from "node:child_process";
import { promisify } from "node:util";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parse as parseYaml } from "yaml";
import { describe, expect, inject, it } from "vitest";
import { HostApi } from "../agent/host-api.ts";
import { Api } from "../cli/api.ts";
import { hmRunner } from "./hm.ts";

const url = inject("hmUrl");
const admin = inject("hmAdmin");
const api = new Api(url, admin);
const home = mkdtempSync(join(tmpdir(), "hm-habits-"));
const bin = resolve(import.meta.dirname, "../bin/hm.mjs");

const hm = hmRunner(url, admin, home);

let n = 0;
const fresh = (p: string) => `${p}-${Date.now().toString(36)}-${n++}`;

const failedReport = (generation: number) => ({
  generation,
  reconciled_at: new Date().toISOString(),
  boot_id: "b1",
  agents: [],
  errors: [{ agent: "logs", op: "install" as const, message: "pull failed" }],
  assignments: { units: [], storage: [] },
});

describe("hm names servers by hostname", () => {
  it("lists hostnames in natural order: sim-2 before sim-10", async () => {
    const fleet = fresh("nat");
    await api.createFleet({ id: fleet });
    for (const h of ["sim-10", "sim-2", "sim-1"]) await api.registerServer({ fleet, hostname: h, kind: "managed" });
    const list = await hm(["servers", "--fleet", fleet, "--no-headers"]);
    expect(
      list.stdout
        .trim()
        .split("\n")
        .map((l) => l.split(/\s+/)[0]),
    ).toEqual(["sim-1", "sim-2", "sim-10"]);
  });

  it("show, desired, patch --role, refresh, rotate-token, release, instances and audit by hostname; lists sorted by hostname", async () => {
    const fleet = fresh("hn");
    await api.createFleet({ id: fleet });
    for (const h of ["b.example.com", "a.example.com"])
      await api.registerServer({ fleet, hostname: h, kind: "managed" });
    const list = await hm(["servers", "--fleet", fleet, "--no-headers"]);
    expect(
      list.stdout
        .trim()
        .split("\n")
        .map((l) => l.split(/\s+/)[0]),
    ).toEqual(["a.example.com", "b.example.com"]);
    const show = await hm(["-o", "json", "servers", "show", "a.example.com"]);
    expect(show.json().hostname).toBe("a.example.com");
    expect((await hm(["servers", "show", `${fleet}/b.example.com`])).stdout).toMatch(/hostname\s+b\.example\.com/);
    const file = join(home, `d-${n++}.json`);
    await import("node:fs").then((fs) =>
      fs.writeFileSync(file, JSON.stringify({ agents: [{ name: "logs", image: "reg/logs:1", version: "1" }] })),
    );
    const set = await hm(["desired", "set", "a.example.com", "-f", file]);
    expect(set.stdout).toMatch(/pinned.*hm desired release a\.example\.com/);
    const inst = await hm(["instances", "--server", "a.example.com"]);
    expect(inst.stdout).toMatch(/^HOSTNAME\s+AGENT.*\na\.example\.com\s+logs/);
    expect((await hm(["-o", "json", "servers", "show", "a.example.com"])).json().planning.mode).toBe("pinned");
    const released = await hm(["desired", "release", "a.example.com"]);
    expect(released.code).toBe(0);
    expect(released.stdout).toMatch(/planned again/);
    const patched = await hm(["-o", "json", "servers", "patch", "a.example.com", "--role", "edge", "web"]);
    expect(patched.json().roles).toEqual(["edge", "web"]);
    expect((await hm(["servers", "refresh", "b.example.com"])).stdout).toMatch(/Asked b\.example\.com to report/);
    const rotated = await hm(["--yes", "-o", "json", "servers", "rotate-token", "b.example.com"]);
    expect(rotated.json().token).toMatch(/^hms\./);
    const audit = await hm(["audit", "--target", "server:a.example.com", "--limit", "3"]);
    expect(audit.stdout).toContain("server:a.example.com");
    const unknown = await hm(["servers", "show", "nobody.example.com"]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/not_found: no server is named 'nobody\.example\.com'/);
  });
});

describe("the daily API in hm", () => {
  it("channels, roles, fleets patch/delete, tokens --kind, decommission --force says what happened", async () => {
    const fleet = fresh("api");
    expect((await hm(["fleets", "create", fleet, "--stale-after", "5m", "--lock-ttl", "1h"])).code).toBe(0);
    expect((await hm(["-o", "json", "fleets", "show", fleet])).json()).toMatchObject({
      stale_after_s: 300,
      lock_ttl_s: 3600,
    });
    expect(
      (await hm(["channels", "set", "base", "--fleet", fleet, "--image", "reg/base:1", "--version", "1"])).stdout,
    ).toMatch(/now reg\/base:1/);
    expect((await hm(["channels", "--fleet", fleet])).stdout).toMatch(/base\s+reg\/base:1\s+1/);
    expect((await hm(["-o", "json", "channels", "show", "base", "--fleet", fleet])).json().history).toHaveLength(1);
    expect(
      (await hm(["roles", "set", "edge", "--fleet", fleet, "--agent", "base", "--agent", "base2@firewall"])).code,
    ).toBe(1); // base2 has no channel
    expect((await hm(["roles", "set", "edge", "--fleet", fleet, "--agent", "base"])).code).toBe(0);
    expect((await hm(["roles", "--fleet", fleet])).stdout).toMatch(/edge\s+base/);
    const patched = await hm([
      "-o",
      "json",
      "fleets",
      "patch",
      fleet,
      "--capability",
      "firewall=true",
      "--stale-after",
      "10m",
    ]);
    expect(patched.json()).toMatchObject({ capabilities: { firewall: true }, stale_after_s: 600 });
    const s = await api.registerServer({ fleet, hostname: "gone.example.com", roles: ["edge"] });
    const forced = await hm([
      "--yes",
      "servers",
      "decommission",
      "gone.example.com",
      "--force",
      "--reason",
      "disk died",
    ]);
    expect(forced.code).toBe(0);
    expect(forced.stdout).not.toMatch(/orders run/);
    expect(forced.stdout).toMatch(/removed|being removed/);
    expect(forced.stdout).toContain("disk died");
    expect(s.token).toMatch(/^hms\./);
    // Only operator tokens by default: a fleet's server tokens are one per server.
    const tokens = await hm(["-o", "json", "tokens"]);
    expect(tokens.json().every((t: { kind: string }) => t.kind === "operator")).toBe(true);
    expect(
      (await hm(["-o", "json", "tokens", "--kind", "server"]))
        .json()
        .some((t: { kind: string }) => t.kind === "server"),
    ).toBe(true);
    // The removed server is gone from the fleet's live list; --state removed shows it.
    expect((await hm(["servers", "--fleet", fleet, "--state", "removed"])).stdout).toContain("gone.example.com");
    for (let i = 0; i < 20 && (await hm(["--yes", "fleets", "delete", fleet])).code !== 0; i++)
      await new Promise((r) => setTimeout(r, 250));
    expect((await hm(["fleets", "show", fleet])).code).toBe(1);
    const run = await hm(["upgrades", "run"]);
    expect(run.stdout).not.toMatch(/^\{/);
    expect(run.stdout).toMatch(/up to date|Applied/);
  });
});

describe("kubectl habits", () => {
  it("--version; -o yaml, wide and --no-headers; relative and absolute times; durations with units", async () => {
    expect((await hm(["--version"])).stdout).toMatch(/^hm \d+\.\d+\.\d+\n$/);
    const fleet = fresh("fmt");
    await api.createFleet({ id: fleet });
    const s = await api.registerServer({ fleet, hostname: "y.example.com" });
    const yaml = parseYaml((await hm(["-o", "yaml", "servers", "--fleet", fleet])).stdout);
    expect(yaml).toEqual([expect.objectContaining({ id: s.id, hostname: "y.example.com" })]);
    const wide = await hm(["-o", "wide", "servers", "--fleet", fleet]);
    expect(wide.stdout).toMatch(/^HOSTNAME.*\bID\b/);
    expect(wide.stdout).toContain(s.id);
    expect((await hm(["servers", "--fleet", fleet])).stdout).not.toContain(s.id);
    // A fleet's creation time is a wide column (the narrow table counts servers and health).
    const fleets = await hm(["-o", "wide", "fleets"]);
    expect(fleets.stdout).toMatch(new RegExp(`${fleet}.*(just now|\\d+s ago)`));
    expect((await hm(["--absolute-times", "-o", "wide", "fleets"])).stdout).toMatch(
      new RegExp(`${fleet}.*\\d{4}-\\d\\d-\\d\\dT`),
    );
    const waited = await hm(["wait", "server", "y.example.com", "--timeout", "1s"]);
    expect(waited.code).toBe(3);
    expect((await hm(["wait", "server", "y.example.com", "--timeout", "soon"])).code).toBe(2);
  });

  it("contexts: login --name keeps several, context use switches, --context picks one for a command", async () => {
    const config = join(home, `ctx-${n++}.json`);
    const env = { HM_CONFIG: config, HM_URL: "", HM_TOKEN: "" };
    expect((await hm(["login", "--name", "one", "--url", url, "--token", admin], { env })).code).toBe(0);
    expect((await hm(["login", "--name", "two", "--url", url, "--token", admin], { env })).code).toBe(0);
    const list = await hm(["context", "list"], { env });
    expect(list.stdout).toMatch(/\*\s+two/);
    expect((await hm(["context", "use", "one"], { env })).code).toBe(0);
    expect(JSON.parse(readFileSync(config, "utf8")).current).toBe("one");
    expect((await hm(["context", "current"], { env })).stdout).toMatch(/^one\s/);
    expect((await hm(["--context", "two", "fleets"], { env })).code).toBe(0);
    expect((await hm(["--context", "three", "fleets"], { env })).code).toBe(2);
  });

  it("completion scripts for bash, zsh and fish know the commands; a closed pipe ends hm quietly", async () => {
    const bash = await hm(["completion", "bash"]);
    expect(bash.stdout).toContain("complete -o default -F _hm hm");
    expect(bash.stdout).toMatch(/\['rollout'\]='start status watch/);
    expect(bash.stdout).toMatch(/\['servers list'\]='.*--hostname/);
    const check = spawnSync(
      "bash",
      ["-c", `${bash.stdout}\nCOMP_WORDS=(hm rollout st); COMP_CWORD=2; _hm; echo "\${COMPREPLY[@]}"`],
      { encoding: "utf8" },
    );
    expect(check.stdout.trim().split(" ").sort()).toEqual(["start", "status"]);
    expect((await hm(["completion", "zsh"])).stdout).toContain("bashcompinit");
    expect((await hm(["completion", "fish"])).stdout).toContain(
      "complete -c hm -n 'test (__hm_path) = '\\''rollout'\\''' -a 'start status watch",
    );
    // `hm … | head -1`: the reader has gone before hm writes (what head does once it has its line).
    const child = spawn(process.execPath, [bin, "completion", "fish"], { stdio: ["ignore", "pipe", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (d) => (stderr += d));
    child.stdout.destroy();
    const code = await new Promise<number | null>((r) => child.on("close", r));
    expect(stderr).not.toMatch(/EPIPE|Error/);
    expect(code).toBe(0);
  });

  it("the simulator writes no colour into a pipe, even under CI", async () => {
    const sim = resolve(import.meta.dirname, "../sim/main.ts");
    const env = { ...process.env, CI: "true", HM_URL: url, HM_TOKEN: admin, FORCE_COLOR: "", NO_COLOR: "" };
    // Not spawnSync: a blocked event loop misses the server closing an idle pooled connection,
    // and the next test's first fetch would then reuse the dead socket ("other side closed").
    const out = await promisify(execFile)(
      process.execPath,
      [
        sim,
        "--fleet",
        fresh("simc"),
        "--servers",
        "2",
        "--duration",
        "2",
        "--ramp",
        "0",
        "--state",
        join(home, `sim-${n++}.json`),
      ],
      {
        env,
        encoding: "utf8",
        timeout: 60_000,
      },
    );
    expect(out.stdout).toContain("servers");
    expect(out.stdout + out.stderr).not.toContain("\x1b[");
  });

  it("says which URL it cannot reach and what to do; a URL without a scheme is a usage error that says so", async () => {
    const unreachable = await hm(["fleets"], { env: { HM_URL: "http://127.0.0.1:1" } });
    expect(unreachable.code).toBe(1);
    expect(unreachable.stderr).toMatch(/cannot reach http:\/\/127\.0\.0\.1:1 .*HM_URL.*--url/);
    expect(unreachable.stderr).not.toMatch(/^error: fetch failed/);
    const noScheme = await hm(["fleets"], { env: { HM_URL: "127.0.0.1:8787" } });
    expect(noScheme.code).toBe(2);
    expect(noScheme.stderr).toMatch(/has no scheme: did you mean http:\/\/127\.0\.0\.1:8787/);
  });
});

describe("hm status", () => {
  it("one request, counts from the server, 'and N more' past the cap, the rollout in progress", async () => {
    const fleet = fresh("st");
    await api.createFleet({ id: fleet });
    await api.putChannel(fleet, "logs", { image: "reg/logs:1", version: "1" });
    await api.putRole(fleet, "edge", { agents: [{ name: "logs" }] });
    const hosts = [];
    for (const h of ["s1", "s2", "s3"])
      hosts.push(await api.registerServer({ fleet, hostname: `${h}.example.com`, roles: ["edge"] }));
    for (const h of hosts) await new HostApi(url, h.token).report(failedReport(h.desired.generation));
    let requests = 0;
    const counting: typeof fetch = (input, init) => (requests++, fetch(input, init));
    let out;
    for (let i = 0; i < 20; i++) {
      requests = 0;
      out = await hm(["status", "--fleet", fleet, "--show", "1"], { fetch: counting });
      if (/and 2 more failed/.test(out.stdout)) break;
      await new Promise((r) => setTimeout(r, 250));
    }
    expect(out!.stdout).toMatch(/failed\s+s1\.example\.com/);
    expect(out!.stdout).toContain(`and 2 more failed (hm servers --fleet ${fleet} --status failed)`);
    expect(requests).toBe(1);
    await api.startRollout({ fleet, agent: "logs", image: "reg/logs:2", version: "2", concurrency: 1 });
    const withRollout = await hm(["status", "--fleet", fleet]);
    expect(withRollout.stdout).toMatch(/rollout logs → reg\/logs:2: running/);
    expect(withRollout.stdout).not.toMatch(/not available yet/);
    const watched = await hm(["status", "--fleet", fleet, "--watch", "--interval", "500ms", "--for", "1.2s"]);
    expect(watched.code).toBe(0);
    expect(watched.stdout.match(/Fleet /g)!.length).toBeGreaterThanOrEqual(2);
  });

  it("rollout targets, events and end-target name servers by hostname", async () => {
    const fleet = fresh("rt");
    await api.createFleet({ id: fleet });
    await api.putChannel(fleet, "logs", { image: "reg/logs:1", version: "1" });
    await api.putRole(fleet, "edge", { agents: [{ name: "logs" }] });
    await api.registerServer({ fleet, hostname: "t1.example.com", roles: ["edge"] });
    const typo = await hm([
      "rollout",
      "start",
      "--fleet",
      fleet,
      "--agent",
      "lgos",
      "--image",
      "reg/lgos:2",
      "--version",
      "2",
    ]);
    expect(typo.code).toBe(1);
    expect(typo.stderr).toMatch(
      /no_targets: no server of fleet '.*' runs agent 'lgos' \(the fleet's servers run: logs\)/,
    );
    const r = await api.startRollout({ fleet, agent: "logs", image: "reg/logs:2", version: "2" });
    expect((await hm(["rollout", "targets", r.id])).stdout).toMatch(/t1\.example\.com\s+applying/);
    expect((await hm(["rollout", "events", r.id])).stdout).toMatch(/target\.applying\s+t1\.example\.com/);
    const ended = await hm(["--yes", "rollout", "end-target", r.id, "t1.example.com", "--reason", "host is dead"]);
    expect(ended.code).toBe(0);
    expect(ended.stdout).toMatch(/t1\.example\.com is failed \(ended by .*: host is dead\)/);
  });
});
