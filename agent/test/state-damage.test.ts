/**
 * A state directory a crash, a power cut or a failing disk left with a file that is not what it
 * should be. Writes are whole or not at all (temporary, fsync, rename), but a disk that lost
 * blocks or a hand edit still happen: each such file gives a clear error or is set aside, never
 * a crash on every start (exit 70, restarted by systemd for ever), and `status` still answers.
 */
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { agentCmd, emptyServer, tempHost } from "./cli-helpers.ts";

const server = await emptyServer();
afterAll(() => server.close());

const TOKEN = "hms.s.secret-never-shown";
const identity = JSON.stringify({
  url: server.url,
  server_id: "s",
  fleet: "f",
  hostname: "h",
  token: TOKEN,
  reboot_group: "default",
  fleetlock_id: null,
  machine_id: "m",
  joined_at: "",
});

function host(files: Record<string, string>) {
  const h = tempHost("hm-state-damage");
  mkdirSync(h.stateDir, { recursive: true, mode: 0o700 });
  for (const [name, text] of Object.entries(files)) writeFileSync(join(h.stateDir, name), text, { mode: 0o600 });
  const env = {
    ...h.env,
    HARBORMASTER_AGENT_TRANSPORT: "http",
    HARBORMASTER_AGENT_ENGINE: join(h.root, "no-such-engine"),
    HARBORMASTER_AGENT_TARBALL_ROOT: h.root,
  };
  return { ...h, env, file: (name: string) => join(h.stateDir, name) };
}

/** `run` until its first accepted report and `until` (or its exit), then stopped as systemd stops it. */
async function runUntilReported(env: Record<string, string>, until: () => boolean = () => true) {
  const before = server.requests.filter((r) => r.url === "/v1/agent/inventory").length;
  const child = spawn(
    join(import.meta.dirname, "../../node_modules/node/bin/node"),
    [join(import.meta.dirname, "../cli/main.ts"), "run"],
    { env: { ...process.env, ...env }, stdio: ["ignore", "ignore", "pipe"] },
  );
  let log = "";
  child.stderr.on("data", (d: Buffer) => (log += d));
  const exited = new Promise<number | null>((ok) => child.on("exit", (code) => ok(code)));
  const deadline = Date.now() + 30_000;
  while (server.requests.filter((r) => r.url === "/v1/agent/inventory").length === before || !until()) {
    if (child.exitCode !== null) break;
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`no report within 30 s; its log:\n${log}`);
    }
    await new Promise((r) => setTimeout(r, 25));
  }
  child.kill("SIGTERM");
  return { code: await exited, log };
}

describe("an identity.json that cannot be read", () => {
  for (const [what, text] of [
    ["cut short", identity.slice(0, 40)],
    ["empty", ""],
    ["JSON, but not an identity", JSON.stringify({ url: "ftp://x", token: TOKEN })],
  ] as const)
    it(`stops run with 78 (not restarted), says which file and what to do, and calls nobody: ${what}`, async () => {
      const h = host({ "identity.json": text });
      const calls = server.requests.length;
      const r = await agentCmd(["run"], h.env);
      expect(r.code).toBe(78);
      expect(r.stderr).toMatch(
        /identity\.json cannot be read \(.+\): restore it from a backup, or remove it and join again/,
      );
      expect(r.stderr).not.toMatch(/unexpected failure|at JSON\.parse/);
      expect(r.stderr).not.toContain("secret-never-shown");
      expect(server.requests.length).toBe(calls);
      // Left as it was, for a person to restore.
      expect(readFileSync(h.file("identity.json"), "utf8")).toBe(text);
    });

  it("is named by status, which says what to do and never quotes the file", async () => {
    // Not JSON from its first character: a parser's message would quote the text.
    const h = host({ "identity.json": `${TOKEN}` });
    const r = await agentCmd(["status"], h.env);
    expect(r.code).toBe(3);
    expect(r.stdout).toMatch(/^unreadable: .*identity\.json cannot be read \(not JSON\)$/m);
    expect(r.stdout).toMatch(
      /joined, but its identity cannot be read: restore identity\.json, or remove it and join again/,
    );
    expect(r.stdout + r.stderr).not.toContain("secret-never-shown");
    const j = await agentCmd(["join", server.url, "hme.a.b"], h.env);
    expect(j.stderr).toMatch(/identity\.json cannot be read/);
    expect(j.stderr).not.toMatch(/unexpected failure/);
    expect(readFileSync(h.file("identity.json"), "utf8")).toBe(TOKEN);
  });
});

describe("status with other files it cannot read", () => {
  it("shows what it can read and names each file it cannot", async () => {
    const h = host({
      "identity.json": identity,
      "status.json": '{"pid": 12',
      "reboot.json": "",
      "self-update.json": "{",
      "self-update-failed.json": "[1,",
    });
    const r = await agentCmd(["status"], h.env);
    expect(r.code, r.stderr).toBe(0);
    for (const f of ["status.json", "reboot.json", "self-update.json", "self-update-failed.json"])
      expect(r.stdout).toMatch(new RegExp(`^unreadable: .*/${f.replace(".", "\\.")} cannot be read`, "m"));
    expect(r.stdout).toMatch(/^joined: +h in fleet f \(server s\)/m);
    expect(r.stdout).toMatch(/^loop: +has not run yet$/m);
    const asJson = await agentCmd(["status", "--json"], h.env);
    expect(JSON.parse(asJson.stdout).unreadable).toHaveLength(4);
  });
});

describe("a state file the system refuses to read (a disk's I/O error; here a directory in its place)", () => {
  it("is named by status, and stops run with 78 before any call, not a crash restarted for ever", async () => {
    const h = host({});
    mkdirSync(h.file("identity.json"));
    const shown = await agentCmd(["status"], h.env);
    expect(shown.stderr).not.toMatch(/unexpected failure/);
    expect(shown.stdout).toMatch(/^unreadable: .*identity\.json cannot be read \(EISDIR\)$/m);
    const calls = server.requests.length;
    const r = await agentCmd(["run"], h.env);
    expect(r.code, r.stderr).toBe(78);
    expect(r.stderr).toMatch(/identity\.json cannot be read \(EISDIR\): restore it from a backup/);
    expect(server.requests.length).toBe(calls);
  });

  it("sets a self-update marker aside as it does one that is not JSON, and runs on", async () => {
    const h = host({ "identity.json": identity });
    mkdirSync(h.file("self-update.json"));
    const r = await runUntilReported(h.env);
    expect(r.code, r.log).toBe(0);
    expect(r.log).toMatch(/self-update: .*self-update\.json cannot be read \(EISDIR\)/);
    expect(r.log).not.toMatch(/unexpected failure/);
    expect(existsSync(h.file("self-update.json.unreadable"))).toBe(true);
  });
});

describe("run with a self-update file it cannot read", () => {
  for (const [what, text] of [
    ["cut short", '{"from":"0.0.9","to":'],
    ["JSON, but not a swap marker", '{"to":"0.0.9","binary":null}'],
  ] as const)
    it(`runs this build on and reports, the swap marker set aside with an error: ${what}`, async () => {
      const h = host({ "identity.json": identity, "self-update.json": text });
      const r = await runUntilReported(h.env);
      expect(r.code, r.log).toBe(0);
      expect(r.log).toMatch(/self-update: .*self-update\.json cannot be read .*running this build .* as it is/);
      expect(r.log).not.toMatch(/unexpected failure/);
      expect(existsSync(h.file("self-update.json"))).toBe(false);
      expect(readFileSync(h.file("self-update.json.unreadable"), "utf8")).toBe(text);
      // Ended as it should: no crash marker for the next start.
      expect(existsSync(h.file("run.json"))).toBe(false);
    });

  it("and with a reboot.json it cannot read: runs, reports, and the healthy report removes it", async () => {
    const h = host({ "identity.json": identity, "reboot.json": '{"phase":"gran' });
    const r = await runUntilReported(h.env, () => !existsSync(h.file("reboot.json")));
    expect(r.code, r.log).toBe(0);
    expect(r.log).toMatch(/reboot: .*reboot\.json cannot be read/);
    expect(r.log).not.toMatch(/unexpected failure/);
  });
});

describe("a boot id file that holds no boot id", () => {
  it("stops run with 78 before any call: every report would be refused for it", async () => {
    const h = host({ "identity.json": identity });
    writeFileSync(h.bootId, `${"x".repeat(200)}\n`);
    const calls = server.requests.length;
    const r = await agentCmd(["run"], h.env);
    expect(r.code).toBe(78);
    expect(r.stderr).toMatch(/boot_id does not hold a boot id: 1-128 letters, .* not \\?"x{40}\\?"…/);
    expect(server.requests.length).toBe(calls);
  });
});
