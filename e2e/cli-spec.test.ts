import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { describe, expect, inject, it } from "vitest";
import { parse, stringify } from "yaml";
import { Api } from "../cli/api.ts";
import { main } from "../cli/main.ts";

const url = inject("hmUrl");
const admin = inject("hmAdmin");
const api = new Api(url, admin);
const home = mkdtempSync(join(tmpdir(), "hm-spec-"));

async function hm(args: string[], opts: { stdin?: string; env?: Record<string, string> } = {}) {
  let stdout = "";
  let stderr = "";
  const code = await main(args, {
    stdout: (s) => void (stdout += s),
    stderr: (s) => void (stderr += s),
    stdin: Readable.from(opts.stdin === undefined ? [] : [opts.stdin]),
    interactive: false,
    env: { HM_CONFIG: join(home, "none.json"), HM_URL: url, HM_TOKEN: admin, ...opts.env },
    cwd: home,
  });
  return { code, stdout, stderr };
}

let n = 0;
/** A fleet with intent set through the API (not through a spec), and servers with its roles. */
async function fleetByHand() {
  const fleet = `spec-${Date.now().toString(36)}-${n++}`;
  await api.createFleet({ id: fleet, capabilities: { firewall: true } });
  const put = async (path: string, body: unknown) => {
    const res = await fetch(`${url}/v1/fleets/${fleet}${path}`, {
      method: "PUT",
      headers: { Authorization: `Bearer ${admin}`, "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    expect(res.status, path).toBe(200);
  };
  await put("/channels/base", { image: "reg/base:1", version: "1" });
  await put("/channels/fw", { image: "reg/fw:1", version: "1" });
  await put("/roles/edge", { agents: [{ name: "base" }] });
  await put("/reboot-groups/default", { slots: 1 });
  const servers = [];
  for (let i = 0; i < 3; i++)
    servers.push(
      await api.registerServer({ fleet, hostname: `e${i}.${fleet}.example.com`, kind: "managed", roles: ["edge"] }),
    );
  return { fleet, servers };
}

describe("hm export, diff and apply against a running server", () => {
  it("round-trips: an export diffs equal (exit 0) and applies as a no-op", async () => {
    const { fleet } = await fleetByHand();
    const dir = join(home, `rt-${n++}`);
    mkdirSync(dir);
    const exported = await hm(["export", fleet, "--to", dir]);
    expect(exported.code).toBe(0);
    const file = join(dir, `${fleet}.yaml`);
    expect(parse(readFileSync(file, "utf8"))).toMatchObject({
      apiVersion: "harbormaster/v1",
      kind: "FleetSpec",
      fleet,
    });
    const d = await hm(["diff", "-f", dir]);
    expect(d.code).toBe(0);
    expect(d.stdout).toContain("up to date");
    const a = await hm(["apply", "-f", file, "--prune"]);
    expect(a.code).toBe(0);
    expect(a.stdout).toContain("up to date");
  });

  it("shows what a changed spec would do (exit 3), asks before applying, applies, and reads back what was applied", async () => {
    const { fleet, servers } = await fleetByHand();
    const file = join(home, `${fleet}.yaml`);
    expect((await hm(["export", fleet, "--to", `${fleet}.yaml`])).code).toBe(0);
    const spec = parse(readFileSync(file, "utf8"));
    spec.roles.edge.agents.push({ name: "fw", when: "firewall" });
    spec.reboot_groups.default.slots = 3;
    spec.reboot_groups.night = {
      slots: 1,
      windows: [{ days: ["Saturday"], start_time: "23:00", length_minutes: 60, time_zone: "Europe/Berlin" }],
    };
    writeFileSync(file, stringify(spec));

    const d = await hm(["diff", "-f", file]);
    expect(d.code).toBe(3);
    expect(d.stdout).toMatch(/~ roles\.edge\.agents: .* → .*"fw"/);
    expect(d.stdout).toContain("~ reboot_groups.default.slots: 1 → 3");
    expect(d.stdout).toMatch(/\+ reboot_groups\.night: /);
    expect(d.stdout).toMatch(/planner: re-plans 3 server\(s\) \(roles edge\)/);
    const asJson = await hm(["--json", "diff", "-f", file]);
    expect(asJson.code).toBe(3);
    expect(JSON.parse(asJson.stdout)[0].items.map((i: { path: string }) => i.path)).toEqual([
      "roles.edge",
      "reboot_groups.default",
      "reboot_groups.night",
    ]);

    const declined = await hm(["apply", "-f", file]);
    expect(declined.code).toBe(1);
    expect((await hm(["diff", "-f", file])).code).toBe(3);

    const applied = await hm(["apply", "-f", file], { stdin: "y\n" });
    expect(applied.code).toBe(0);
    expect(applied.stdout).toMatch(/applied; planner: 3 of 3 server\(s\)/);
    expect((await hm(["diff", "-f", file])).code).toBe(0);
    for (const s of servers) expect((await api.getDesired(s.id)).agents.map((a) => a.name)).toEqual(["base", "fw"]);
    const back = await hm(["--json", "export", fleet]);
    const read = JSON.parse(back.stdout);
    expect(read.reboot_groups.night.windows[0].days).toEqual(["Sat"]);
    expect(read.roles).toEqual(spec.roles);
    expect((await api.getGroup(fleet, "default")).slots).toBe(3);
  });

  it("takes a directory of specs for many fleets, and reports a bad spec with all its problems (exit 1)", async () => {
    const a = await fleetByHand();
    const b = await fleetByHand();
    const dir = join(home, `many-${n++}`);
    mkdirSync(dir);
    expect((await hm(["export", a.fleet, b.fleet, "--to", dir])).code).toBe(0);
    expect((await hm(["diff", "-f", dir])).code).toBe(0);
    const changed = parse(readFileSync(join(dir, `${b.fleet}.yaml`), "utf8"));
    changed.channels.base.image = "reg/base:2";
    writeFileSync(join(dir, `${b.fleet}.yaml`), stringify(changed));
    const d = await hm(["diff", "-f", dir]);
    expect(d.code).toBe(3);
    expect(d.stdout).toMatch(new RegExp(`fleet ${a.fleet} .*up to date`));
    expect(d.stderr).toContain("1 of 2 fleet(s) differ");
    expect((await hm(["--yes", "apply", "-f", dir])).code).toBe(0);
    expect((await hm(["diff", "-f", dir])).code).toBe(0);

    changed.reboot_groups.default.slots = 0;
    changed.roles.edge.agents.push({ name: "ghost" });
    writeFileSync(join(dir, `${b.fleet}.yaml`), stringify(changed));
    const bad = await hm(["--yes", "apply", "-f", dir]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain("invalid_spec");
    expect(bad.stderr).toMatch(/reboot_groups\.default\.slots: /);
    expect(bad.stderr).toMatch(/roles\.edge\.agents\.1\.name: agent 'ghost' has no channel/);
    expect((await api.getGroup(b.fleet, "default")).slots).toBe(1);
  });

  it("creates a fleet that does not exist from a spec: another fleet's export, renamed, applies as a new fleet that exports the same", async () => {
    const { fleet: source } = await fleetByHand();
    const target = `${source}-copy`;
    const spec = JSON.parse((await hm(["--json", "export", source])).stdout);
    const file = join(home, `${target}.yaml`);
    writeFileSync(file, stringify({ ...spec, fleet: target }));
    const d = await hm(["diff", "-f", file]);
    expect(d.code).toBe(3);
    expect(d.stdout).toContain(`+ fleet ${target}`);
    expect(d.stdout).toContain("new fleet, created by apply");
    const applied = await hm(["--yes", "apply", "-f", file]);
    expect(applied.code, applied.stderr).toBe(0);
    expect(applied.stdout).toContain(`created fleet ${target}`);
    expect((await hm(["diff", "-f", file])).code).toBe(0);
    expect(JSON.parse((await hm(["--json", "export", target])).stdout)).toEqual({ ...spec, fleet: target });
  });

  it("applies webhooks whose secret comes from the environment: never in the spec or the audit, kept when not set, rotated when changed", async () => {
    const { fleet } = await fleetByHand();
    const file = join(home, `${fleet}-hooks.yaml`);
    const spec = JSON.parse((await hm(["--json", "export", fleet])).stdout);
    spec.webhooks = {
      pager: { url: "https://hooks.example.com/pager", events: ["reboot.stuck"], secret_ref: { env: "PAGER_SECRET" } },
    };
    writeFileSync(file, stringify(spec));
    const first = "e2e-secret-0123456789abcdef";
    // Not set: a new webhook is refused, nothing applied.
    const refused = await hm(["--yes", "apply", "-f", file]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/webhooks\.pager\.secret_ref: .*PAGER_SECRET was not sent/);
    const applied = await hm(["--yes", "apply", "-f", file], { env: { PAGER_SECRET: first } });
    expect(applied.code, applied.stderr).toBe(0);
    expect(applied.stdout).toContain("+ webhooks.pager");
    const hooks = (await (
      await fetch(`${url}/v1/fleets/${fleet}/webhooks`, { headers: { Authorization: `Bearer ${admin}` } })
    ).json()) as { items: unknown[] };
    expect(hooks.items).toEqual([expect.objectContaining({ name: "pager", url: "https://hooks.example.com/pager" })]);
    // Up to date with the same secret, or with none sent (it is kept); a new value is a change.
    expect((await hm(["diff", "-f", file], { env: { PAGER_SECRET: first } })).code).toBe(0);
    expect((await hm(["diff", "-f", file])).code).toBe(0);
    const rotated = await hm(["diff", "-f", file], { env: { PAGER_SECRET: "e2e-rotated-0123456789abcdef" } });
    expect(rotated.code).toBe(3);
    expect(rotated.stdout).toContain('~ webhooks.pager.secret: "(kept)" → "(new, from $PAGER_SECRET)"');
    expect(
      (await hm(["--yes", "apply", "-f", file], { env: { PAGER_SECRET: "e2e-rotated-0123456789abcdef" } })).code,
    ).toBe(0);
    const exported = (await hm(["export", fleet])).stdout;
    expect(parse(exported).webhooks.pager.secret_ref).toEqual({ env: "PAGER_SECRET" });
    const audit = await (
      await fetch(`${url}/v1/audit?target=fleet:${fleet}&limit=100`, { headers: { Authorization: `Bearer ${admin}` } })
    ).text();
    for (const text of [exported, audit, readFileSync(file, "utf8")]) {
      expect(text).not.toContain(first);
      expect(text).not.toContain("e2e-rotated");
    }
  });

  it("sets servers' labels by hostname: diff shows each, apply writes the named ones, a hostname not enrolled yet waits", async () => {
    const { fleet, servers } = await fleetByHand();
    const file = join(home, `${fleet}-servers.yaml`);
    expect((await hm(["export", fleet, "--to", `${fleet}-servers.yaml`])).code).toBe(0);
    const spec = parse(readFileSync(file, "utf8"));
    expect(spec.servers).toEqual({});
    spec.servers = {
      [`e0.${fleet}.example.com`]: { labels: { zone: "eu-1a" } },
      [`later.${fleet}.example.com`]: { labels: { zone: "eu-1b" } },
    };
    writeFileSync(file, stringify(spec));
    const d = await hm(["diff", "-f", file]);
    expect(d.code, d.stderr).toBe(3);
    expect(d.stdout).toContain(`+ servers.e0.${fleet}.example.com: {"labels":{"zone":"eu-1a"}}`);
    expect(d.stdout).toContain(`+ servers.later.${fleet}.example.com: {"labels":{"zone":"eu-1b"}}`);
    expect(d.stdout).toContain("its labels wait for it to register (pending)");
    const a = await hm(["--yes", "apply", "-f", file]);
    expect(a.code, a.stderr).toBe(0);
    expect((await hm(["diff", "-f", file])).code).toBe(0);
    const labels = async (id: string) => (await api.getServer(id)).labels;
    expect(await labels(servers[0].id)).toEqual({ zone: "eu-1a" });
    expect(await labels(servers[1].id)).toEqual({});
    const later = await api.registerServer({
      fleet,
      hostname: `later.${fleet}.example.com`,
      kind: "managed",
      roles: ["edge"],
    });
    expect(await labels(later.id)).toEqual({ zone: "eu-1b" });
  });
});
