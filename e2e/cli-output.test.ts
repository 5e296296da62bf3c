/**
 * hm's one habit: every command answers -o json with the API's objects, a list always as a JSON
 * array; host text printed with its control characters visible; a second terminal in a checkout
 * where `npm start` ran finds the server through the local server record; a refusal says which
 * deployment refused and where the token came from; a default fleet per context; rollouts and
 * webhooks by short id, name or `latest`.
 */
import { createServer } from "node:http";
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Command } from "commander";
import { afterAll, describe, expect, inject, it } from "vitest";
import { HostApi } from "../agent/host-api.ts";
import { Api } from "../cli/api.ts";
import { processIo } from "../cli/io.ts";
import { buildProgram } from "../cli/main.ts";
import { hmRunner } from "./hm.ts";

const url = inject("hmUrl");
const admin = inject("hmAdmin");
const api = new Api(url, admin);
const home = mkdtempSync(join(tmpdir(), "hm-output-"));
const hm = hmRunner(url, admin, home);

let n = 0;
const fresh = (p: string) => `${p}-${Date.now().toString(36)}-${n++}`;

const receiver = createServer((req, res) => {
  req.resume();
  req.on("end", () => res.writeHead(204).end());
});
const port = await new Promise<number>((r) =>
  receiver.listen(0, "127.0.0.1", () => r((receiver.address() as { port: number }).port)),
);
afterAll(() => new Promise<void>((r) => receiver.close(() => r())));

/** Every command path hm has, leaves and parents with an action of their own ("upgrades"). */
function commandPaths(): string[] {
  const out: string[] = [];
  const walk = (c: Command, path: string[]) => {
    const own = (c as unknown as { _actionHandler: unknown })._actionHandler;
    if (path.length && (own || !c.commands.length)) out.push(path.join(" "));
    for (const s of c.commands) walk(s, [...path, s.name()]);
  };
  walk(buildProgram(processIo()), []);
  return out;
}

/** Commands the walk below does not run, and why. */
const NOT_WALKED: Record<string, string> = {
  whoami: "hidden; prints one line for people",
  completion: "prints a shell script, not data",
  "reboot-groups dequeue":
    "needs a host parked in the queue (FleetLock); the answer is printed by the same ctx.machine path",
  "reboot-groups release":
    "needs a host holding a slot (FleetLock); the answer is printed by the same ctx.machine path",
  "fix-holds release":
    "needs a drift fix's write its server never realized (a disruption budget, a drifted host): e2e/cli-safety.test.ts releases one with --json and without",
  "agent publish":
    "replaces the deployment's one agent build, which other files download; e2e/enrollment.test.ts publishes with -o json",
  "rollout watch": "follows a rollout to its end; `rollout start --watch` prints the same object",
  "sessions end": "needs an SSO session, which needs an OpenID provider: e2e/sso-oidc.test.ts ends one with -o json",
  "audit export": "writes the API's NDJSON, one row a line, whatever -o says; e2e/cli-audit.test.ts reads it",
};

const escapes = "\x1b[2J\x1b[31mhidden\x1b]0;owned\x07";

describe("every hm command answers -o json in one shape", () => {
  it("walks every command: lists are JSON arrays, everything else one JSON object", async () => {
    const fleet = fresh("out");
    const other = fresh("out-del");
    const config = join(home, `walk-${n++}.json`);
    const cfgEnv = { HM_CONFIG: config };
    const desiredFile = join(home, `desired-${n++}.json`);
    writeFileSync(desiredFile, JSON.stringify({ agents: [{ name: "logs", image: "reg/logs:1", version: "1" }] }));
    const specDir = mkdtempSync(join(home, "spec-"));
    // Hostnames of this fleet only: other files of the suite name servers a.example.com too.
    const A = `a.${fleet}.test`;
    const B = `b.${fleet}.test`;

    type Shape = "list" | "object";
    const seen = new Set<string>();
    const run = async (
      path: string,
      args: string[],
      shape: Shape,
      opts: { env?: Record<string, string>; stdin?: string } = {},
    ) => {
      seen.add(path);
      const r = await hm(["-o", "json", "--yes", ...path.split(" "), ...args], opts);
      expect(r.code, `${path}: ${r.stderr}`).toBe(0);
      const v = r.json();
      if (shape === "list") expect(Array.isArray(v), `${path} is a list: a JSON array`).toBe(true);
      else expect(v !== null && typeof v === "object" && !Array.isArray(v), `${path} is one object`).toBe(true);
      return v;
    };

    await run("login", ["--name", "walk", "--url", url, "--token", admin], "object", { env: cfgEnv });
    await run("context list", [], "list", { env: cfgEnv });
    await run("context current", [], "object", { env: cfgEnv });
    await run("env", [], "object");
    await run("context use", ["walk"], "object", { env: cfgEnv });
    await run("status", [], "object");
    await run("fleets create", [fleet], "object");
    await run("fleets create", [other], "object");
    await run("context set-fleet", [fleet], "object", { env: cfgEnv });
    const enrollToken = await run("enroll-tokens create", [fleet, "--name", "walk", "--expires", "1h"], "object");
    await run("enroll-tokens list", [fleet], "list");
    await run("enroll-tokens revoke", [fleet, enrollToken.id], "object");
    await run("fleets list", [], "list");
    await run("fleets show", [fleet], "object");
    await run("fleets patch", [other, "--stale-after", "5m"], "object");
    await run("fleets refresh", [fleet], "object");
    await run("fleets delete", [other], "object");
    await run("channels set", ["logs", "--fleet", fleet, "--image", "reg/logs:1", "--version", "1"], "object");
    await run("channels list", ["--fleet", fleet], "list");
    await run("channels show", ["logs", "--fleet", fleet], "object");
    const imageFile = join(home, `image-${n++}.tar`);
    writeFileSync(imageFile, "bytes of a walked image");
    const image = await run("images push", [`walk-${fleet}`, "1", imageFile, "--kind", "tarball"], "object");
    await run("images ls", ["--name", `walk-${fleet}`], "list");
    await run("images show", [image.id], "object");
    await run("images rm", [image.id], "object");
    await run("roles set", ["edge", "--fleet", fleet, "--agent", "logs"], "object");
    await run("roles list", ["--fleet", fleet], "list");
    await run("roles show", ["edge", "--fleet", fleet], "object");
    await run("servers register", ["--fleet", fleet, "--hostname", A, "--role", "edge"], "object");
    const b = await run("servers register", ["--fleet", fleet, "--hostname", B], "object");
    await run("servers list", ["--fleet", fleet], "list");
    await run("servers show", [A], "object");
    await run("servers patch", [B, "--reboot-group", "night"], "object");
    await run("servers refresh", [A], "object");
    await run("servers rotate-token", [B], "object");
    await run("desired set", [B, "-f", desiredFile], "object");
    await run("desired get", [B], "object");
    await run("desired release", [B], "object");
    await run("instances", ["--server", A], "list");
    await run("wait server", [A, "--status", "unknown", "--timeout", "5s"], "object");
    await run("check server-agents", ["--fleet", fleet], "object");
    await run("reboot-groups set", ["night", "--fleet", fleet, "--slots", "1"], "object");
    await run("reboot-groups list", ["--fleet", fleet], "list");
    await run("reboot-groups show", ["night", "--fleet", fleet], "object");
    await run("fleetlock-waiting", ["--fleet", fleet], "list");
    await run("fix-holds list", ["--fleet", fleet], "list");
    await run("reboot-groups pause", ["night", "--fleet", fleet], "object");
    await run("reboot-groups resume", ["night", "--fleet", fleet], "object");
    await run("gates set", ["--fleet", fleet, "--rollouts"], "object");
    await run("gates show", ["--fleet", fleet], "object");
    await run("hold", ["night", "--fleet", fleet, "--reason", "walk"], "object");
    await run("unhold", ["night", "--fleet", fleet], "object");
    await run("fleetlock-key rotate", ["--fleet", fleet], "object");
    const hook = await run(
      "webhooks add",
      ["--fleet", fleet, "--to", `http://127.0.0.1:${port}/h`, "--event", "server.failed"],
      "object",
    );
    await run("webhooks list", ["--fleet", fleet], "list");
    await run("webhooks test", [hook.webhook.id, "--fleet", fleet], "object");
    await run("webhooks deliveries", [hook.webhook.id, "--fleet", fleet], "list");
    await run("webhooks rm", [hook.webhook.id, "--fleet", fleet], "object");
    const rollout = await run(
      "rollout start",
      ["--fleet", fleet, "--agent", "logs", "--image", "reg/logs:2", "--version", "2"],
      "object",
    );
    await run("rollouts", ["--fleet", fleet], "list");
    await run("rollout status", [rollout.id], "object");
    await run("rollout targets", [rollout.id], "list");
    await run("rollout events", [rollout.id], "list");
    await run("rollout pause", [rollout.id], "object");
    await run("rollout resume", [rollout.id], "object");
    await run("rollout end-target", [rollout.id, A], "object");
    await run("rollout rollback", [rollout.id], "object");
    await run(
      "rollout start",
      ["--fleet", fleet, "--agent", "logs", "--image", "reg/logs:3", "--version", "3"],
      "object",
    );
    await run("rollout cancel", ["latest"], "object");
    const exported = await run("export", [fleet], "object");
    writeFileSync(join(specDir, `${fleet}.json`), JSON.stringify(exported));
    await run("diff", ["-f", join(specDir, `${fleet}.json`)], "list");
    await run("apply", ["-f", join(specDir, `${fleet}.json`)], "list");
    await run("roles delete", ["edge", "--fleet", fleet], "object");
    const token = await run(
      "tokens create",
      ["--name", "walk", "--scope", "read", "--fleet", fleet, "--expires", "30d", "--description", "the walk"],
      "object",
    );
    await run("tokens list", [], "list");
    await run("tokens revoke", [token.id], "object");
    const mapping = await run(
      "sso mappings add",
      ["--group", `walk-${fleet}`, "--scope", "read", "--fleet", fleet],
      "object",
    );
    await run("sso mappings list", [], "list");
    await run("sso mappings remove", [mapping.id], "object");
    await run("sessions list", [], "list");
    await run("audit", ["--limit", "3"], "list");
    await run("audit verify", [], "object");
    await run("history", ["--fleet", fleet, "--since", "1h"], "object");
    await run("upgrades", [], "object");
    await run("upgrades run", [], "object");
    await run("servers decommission", [b.id, "--force", "--reason", "walk"], "object");
    await run("context delete", ["walk"], "object", { env: cfgEnv });

    // Every command is walked above or says why not: a new command needs one of the two.
    expect(commandPaths().filter((p) => !seen.has(p) && !NOT_WALKED[p])).toEqual([]);
  });

  it("-o name prints one name a line, and --json is -o json", async () => {
    const fleet = fresh("names");
    await api.createFleet({ id: fleet });
    for (const h of [`n1.${fleet}.test`, `n2.${fleet}.test`])
      await api.registerServer({ fleet, hostname: h, kind: "managed" });
    const ids = (await api.listServers({ fleet })).map((s) => s.id).sort();
    expect((await hm(["-o", "name", "servers", "--fleet", fleet])).stdout.trim().split("\n").sort()).toEqual(ids);
    expect((await hm(["-o", "name", "fleets", "show", fleet])).stdout).toBe(`${fleet}\n`);
    expect((await hm(["-o", "name", "audit", "--limit", "2"])).stdout).toMatch(/^\d+\n\d+\n$/);
    expect((await hm(["--json", "reboot-groups", "--fleet", fleet])).json()).toEqual(
      (await hm(["-o", "json", "reboot-groups", "--fleet", fleet])).json(),
    );
  });
});

describe("hm history", () => {
  it("prints the rollup as tables, the API's CSV with -o csv, only the metrics asked for; -o csv elsewhere is a usage error", async () => {
    const fleet = fresh("hist");
    await api.createFleet({ id: fleet });
    for (const h of [`h1.${fleet}.test`, `h2.${fleet}.test`])
      await api.registerServer({ fleet, hostname: h, kind: "managed" });
    // One cron tick at the start of a period rolls every fleet up.
    const at = Date.now() - (Date.now() % 300_000) + 1_000;
    expect((await fetch(`${url}/__scheduled?cron=${encodeURIComponent("* * * * *")}&time=${at}`)).ok).toBe(true);
    await expect
      .poll(async () => (await api.history(fleet, { metric: "servers" })).servers?.length ?? 0, { timeout: 15_000 })
      .toBeGreaterThan(0);

    const table = await hm(["history", "--fleet", fleet]);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toMatch(/Servers by status/);
    expect(table.stdout).toMatch(/NEVER REPORTED/);
    expect(table.stdout).toMatch(/Per day \(UTC\)/);

    const csv = await hm(["-o", "csv", "history", "--fleet", fleet, "--metric", "servers"]);
    expect(csv.code, csv.stderr).toBe(0);
    const lines = csv.stdout.trimEnd().split("\r\n");
    expect(lines[0]).toBe("at,metric,agent,series,value");
    expect(lines).toContainEqual(expect.stringMatching(/,servers,,unknown,2$/));
    expect(lines.every((l, i) => i === 0 || l.split(",")[1] === "servers")).toBe(true);

    const json = (await hm(["-o", "json", "history", "--fleet", fleet, "--metric", "reboots,rollouts"])).json();
    expect(json.metrics).toEqual(["reboots", "rollouts"]);
    expect(json.servers).toBeUndefined();

    const typo = await hm(["history", "--fleet", fleet, "--metric", "cpu"]);
    expect(typo.code).toBe(2);
    expect(typo.stderr).toMatch(/servers, versions, reboots, rollouts/);
    const elsewhere = await hm(["-o", "csv", "fleets"]);
    expect(elsewhere.code).toBe(2);
    expect(elsewhere.stderr).toMatch(/only hm history writes CSV/);
  });
});

describe("text a host controls is printed with its control characters visible", () => {
  it("a report's error message with escape codes shows as \\x1b… in servers show, table and wide; json keeps it exact", async () => {
    const fleet = fresh("esc");
    await api.createFleet({ id: fleet });
    const s = await api.registerServer({ fleet, hostname: `esc.${fleet}.test`, kind: "managed" });
    const desired = await api.putDesired(s.id, {
      generation: (await api.getDesired(s.id)).generation + 1,
      agents: [{ name: "logs", image: "reg/logs:1", version: "1" }],
    });
    await new HostApi(url, s.token).report({
      generation: desired.generation,
      reconciled_at: new Date().toISOString(),
      boot_id: "b1",
      agents: [],
      errors: [{ agent: "logs", op: "install", message: escapes }],
      assignments: { units: [], storage: [] },
    });
    for (const args of [
      ["servers", "show", s.id],
      ["-o", "wide", "servers", "show", s.id],
    ]) {
      const r = await hm(args);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toContain("\\x1b[2J\\x1b[31mhidden\\x1b]0;owned\\x07");
      // No control character but the line ends reaches the terminal.
      // oxlint-disable-next-line no-control-regex -- the control characters are what is looked for
      expect(r.stdout).not.toMatch(/[\x00-\x09\x0b-\x1f\x7f]/);
    }
    const json = await hm(["-o", "json", "servers", "show", s.id]);
    expect(JSON.stringify(json.json())).toContain(JSON.stringify(escapes).slice(1, -1));
  });
});

describe("a second terminal finds the server npm start recorded", () => {
  it("uses .wrangler/hm-local.json from the checkout with nothing exported, and says where a refused token came from", async () => {
    const checkout = mkdtempSync(join(tmpdir(), "hm-checkout-"));
    mkdirSync(join(checkout, ".wrangler"));
    mkdirSync(join(checkout, "docs"));
    const record = join(checkout, ".wrangler", "hm-local.json");
    writeFileSync(record, JSON.stringify({ url, token: admin, pid: 1, started_at: new Date().toISOString() }));
    const fleet = fresh("rec");
    await api.createFleet({ id: fleet });
    // From a directory below the checkout, as a shell in docs/ would.
    const found = await hm(["-o", "json", "fleets", "show", fleet], { auth: false, cwd: join(checkout, "docs") });
    expect(found.code, found.stderr).toBe(0);
    expect((await hm(["context", "current"], { auth: false, cwd: checkout })).stdout).toContain(
      `token from the local server record (${record}`,
    );

    writeFileSync(record, JSON.stringify({ url, token: "not-the-token" }));
    const refused = await hm(["fleets"], { auth: false, cwd: checkout });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/unauthorized/);
    expect(refused.stderr).toContain(
      `refused by ${url} (URL from the local server record (${record}, written by npm start)); token from the local server record`,
    );
    const stale = await hm(["fleets"], { auth: false, cwd: checkout, env: { HM_TOKEN: "stale" } });
    expect(stale.stderr).toMatch(/token from HM_TOKEN$/m);
  });

  it("a missing context names the option that adds it", async () => {
    const r = await hm(["--context", "down2", "fleets"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("hm login --name down2 --url URL --token TOKEN adds it");
  });
});

describe("a default fleet, and objects by short id, name or latest", () => {
  it("fleet commands take HM_FLEET or the context's fleet when --fleet is not given, and say how when neither is set", async () => {
    const fleet = fresh("def");
    await api.createFleet({ id: fleet });
    await api.putGroup(fleet, "night", { slots: 2 });
    const none = await hm(["reboot-groups"]);
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(
      /which fleet\? pass --fleet NAME, set HM_FLEET, or keep one in the context: hm context set-fleet NAME/,
    );
    expect((await hm(["-o", "name", "reboot-groups"], { env: { HM_FLEET: fleet } })).stdout).toMatch(/night/);
    const config = join(home, `fleet-${n++}.json`);
    const env = { HM_CONFIG: config, HM_URL: "", HM_TOKEN: "" };
    expect((await hm(["login", "--name", "d", "--url", url, "--token", admin, "--fleet", fleet], { env })).code).toBe(
      0,
    );
    expect((await hm(["-o", "name", "reboot-groups"], { env })).stdout).toMatch(/night/);
    // --fleet still wins over the context's.
    expect((await hm(["reboot-groups", "--fleet", "nope-fleet"], { env })).code).toBe(1);
  });

  it("rollouts by latest, agent name and short id; an ambiguous or unknown reference is refused", async () => {
    const fleet = fresh("ref");
    await api.createFleet({ id: fleet });
    await api.registerServer({ fleet, hostname: `r.${fleet}.test`, kind: "managed" });
    // Channel-only rollouts: the fleet's servers need not run the agents.
    const first = await api.startRollout({
      fleet,
      agent: "alpha",
      image: "reg/alpha:1",
      version: "1",
      channel_only: true,
    });
    const second = await api.startRollout({
      fleet,
      agent: "beta",
      image: "reg/beta:1",
      version: "1",
      channel_only: true,
    });
    const env = { HM_FLEET: fleet };
    expect((await hm(["-o", "json", "rollout", "status", "latest"], { env })).json().id).toBe(second.id);
    expect((await hm(["-o", "json", "rollout", "status", "alpha"], { env })).json().id).toBe(first.id);
    expect((await hm(["-o", "json", "rollout", "status", first.id.slice(0, 8)], { env })).json().id).toBe(first.id);
    const unknown = await hm(["rollout", "status", "zzzzzzzz"], { env });
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/no rollout 'zzzzzzzz'/);
  });
});
