/**
 * Enrollment and the installer against the real local server: hm creates an enrollment token, a
 * machine enrolls with it over HTTP; hm publishes an agent build that downloads byte for byte;
 * and install.sh runs for real with sh, into a temporary root, with a stand-in agent (a shell
 * script that records its arguments and enrolls with curl) and a stand-in systemctl.
 */
import { spawnSync } from "node:child_process";
import { createHash, randomUUID } from "node:crypto";
import { chmodSync, mkdtempSync, readFileSync, statSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, inject, it } from "vitest";
import { adminApi, hmRunner } from "./harness.ts";

const url = inject("hmUrl");
const hm = hmRunner("enroll");
const work = mkdtempSync(join(tmpdir(), "hm-enroll-e2e-"));
const sha256 = (b: Buffer | string) => createHash("sha256").update(b).digest("hex");
let n = 0;

async function newFleet() {
  const fleet = `enr-${Date.now().toString(36)}-${n++}`;
  expect((await hm(["fleets", "create", fleet])).code).toBe(0);
  return fleet;
}

const enroll = (token: string, body: Record<string, unknown>) =>
  fetch(`${url}/v1/agent/enroll`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });

const machine = () => ({
  hostname: `m${n++}.example.com`,
  machine_id: randomUUID().replace(/-/g, ""),
  boot_id: randomUUID(),
});

/** The stand-in for harbormaster-agent: records its arguments; `join URL TOKEN` enrolls with curl as the agent would. */
const FAKE_AGENT = `#!/bin/sh
printf '%s\\n' "$@" > "$FAKE_AGENT_LOG"
if [ "$1" = join ]; then
  host=$(hostname)
  if [ "$4" = --hostname ]; then host=$5; fi
  curl -fsS -X POST -H "Authorization: Bearer $3" -H 'Content-Type: application/json' \\
    -d "{\\"hostname\\":\\"$host\\",\\"machine_id\\":\\"$FAKE_MACHINE_ID\\",\\"boot_id\\":\\"b-1\\"}" "$2/v1/agent/enroll" > "$FAKE_AGENT_LOG.answer"
fi
`;

function fakeBin() {
  const dir = mkdtempSync(join(work, "bin-"));
  writeFileSync(join(dir, "systemctl"), `#!/bin/sh\necho "$*" >> "$FAKE_SYSTEMCTL_LOG"\n`);
  chmodSync(join(dir, "systemctl"), 0o755);
  return dir;
}

async function publishFake() {
  const file = join(work, "harbormaster-agent");
  writeFileSync(file, FAKE_AGENT);
  const res = await hm([
    "--json",
    "agent",
    "publish",
    file,
    "--os",
    "linux",
    "--arch",
    "x64",
    "--version",
    "0.0.1-test",
  ]);
  expect(res.code, res.stderr).toBe(0);
  return { file, bytes: readFileSync(file) };
}

async function installScript() {
  const res = await fetch(`${url}/install.sh`);
  expect(res.status).toBe(200);
  const path = join(work, `install-${n++}.sh`);
  writeFileSync(path, await res.text());
  return path;
}

function runInstall(script: string, args: string[], opts: { path?: string } = {}) {
  const bin = fakeBin();
  const log = join(work, `agent-${n++}.log`);
  const systemctlLog = join(work, `systemctl-${n++}.log`);
  const machineId = randomUUID().replace(/-/g, "");
  const r = spawnSync("sh", [script, ...args], {
    encoding: "utf8",
    env: {
      ...process.env,
      PATH: `${opts.path ? `${opts.path}:` : ""}${bin}:${process.env.PATH}`,
      FAKE_AGENT_LOG: log,
      FAKE_SYSTEMCTL_LOG: systemctlLog,
      FAKE_MACHINE_ID: machineId,
    },
  });
  return { ...r, log, systemctlLog };
}

describe("enrollment end to end", () => {
  it("hm enroll-tokens create prints the token once; a machine enrolls with it over HTTP; ls counts it; revoke stops it", async () => {
    const fleet = await newFleet();
    const created = await hm([
      "enroll-tokens",
      "create",
      fleet,
      "--max-uses",
      "2",
      "--roles",
      "web",
      "--expires",
      "2h",
      "--name",
      "e2e",
    ]);
    expect(created.code, created.stderr).toBe(0);
    const token = /token\s+(hme\.\S+)/.exec(created.stdout)?.[1];
    expect(token).toBeTruthy();
    expect(created.stdout + created.stderr).toContain(`curl -fsSL ${url}/install.sh | sudo sh -s -- --token ${token}`);

    const m = machine();
    const res = await enroll(token!, m);
    expect(res.status).toBe(201);
    const server = (await res.json()) as { id: string; fleet: string; roles: string[]; token: string };
    expect(server).toMatchObject({ fleet, roles: ["web"] });
    expect(server.token).toMatch(/^hms\./);

    const ls = await hm(["--json", "enroll-tokens", "ls", fleet]);
    expect(ls.code).toBe(0);
    const [listed] = ls.json();
    expect(listed).toMatchObject({ name: "e2e", uses: 1, max_uses: 2, state: "active" });
    expect(ls.stdout).not.toContain(token!.split(".")[2]);
    const table = await hm(["enroll-tokens", "ls", fleet]);
    expect(table.stdout).toMatch(/1\/2/);

    const revoked = await hm(["--yes", "enroll-tokens", "revoke", fleet, listed.id]);
    expect(revoked.code, revoked.stderr).toBe(0);
    expect((await enroll(token!, machine())).status).toBe(401);
    const audit = await adminApi("GET", `/v1/audit?target=${encodeURIComponent(`server:${server.id}`)}`);
    expect(audit.json.items.map((a: any) => a.action)).toContain("server.enroll");
  });

  it("harbormaster-agent join --label sends the machine's labels, merged over the token's (the machine's win)", async () => {
    const fleet = await newFleet();
    const token = (
      await hm(["--json", "enroll-tokens", "create", fleet, "--label", "zone=eu-1a", "--label", "tier=web"])
    ).json().token as string;
    const root = mkdtempSync(join(work, "agent-"));
    writeFileSync(join(root, "machine-id"), `${randomUUID().replace(/-/g, "")}\n`);
    writeFileSync(join(root, "boot_id"), `${randomUUID()}\n`);
    const hostname = `lab-${n++}.example.com`;
    // The real command from its sources, as the agent's own suite runs it.
    const r = spawnSync(
      process.execPath,
      [
        new URL("../agent/cli/main.ts", import.meta.url).pathname,
        "join",
        url,
        token,
        "--hostname",
        hostname,
        "--label",
        "zone=eu-1b",
        "--label",
        "rack=r7",
      ],
      {
        encoding: "utf8",
        env: {
          ...process.env,
          HARBORMASTER_AGENT_MACHINE_ID_FILE: join(root, "machine-id"),
          HARBORMASTER_AGENT_BOOT_ID_FILE: join(root, "boot_id"),
          HARBORMASTER_AGENT_STATE_DIR: join(root, "state"),
        },
      },
    );
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toContain(`joined fleet ${fleet} as ${hostname}`);
    const shown = await hm(["--json", "servers", "show", `${fleet}/${hostname}`]);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.json().labels).toEqual({ rack: "r7", tier: "web", zone: "eu-1b" });
  });

  it("hm agent publish stores a build that downloads byte for byte, with a matching SHA-256", async () => {
    const file = join(work, "build.bin");
    const bytes = Buffer.from(Array.from({ length: 3 * 1024 * 1024 }, (_, i) => (i * 7919) & 0xff));
    writeFileSync(file, bytes);
    const pub = await hm([
      "--json",
      "agent",
      "publish",
      file,
      "--os",
      "linux",
      "--arch",
      "arm64",
      "--version",
      "2.0.0",
    ]);
    expect(pub.code, pub.stderr).toBe(0);
    expect(pub.json()).toMatchObject({
      os: "linux",
      arch: "arm64",
      version: "2.0.0",
      sha256: sha256(bytes),
      size: bytes.length,
    });
    const got = await fetch(`${url}/v1/agent/download/linux-arm64`);
    expect(got.status).toBe(200);
    const downloaded = Buffer.from(await got.arrayBuffer());
    expect(downloaded.equals(bytes)).toBe(true);
    expect(got.headers.get("x-checksum-sha256")).toBe(sha256(bytes));
    expect(await (await fetch(`${url}/v1/agent/download/linux-arm64.sha256`)).text()).toBe(
      `${sha256(bytes)}  harbormaster-agent-linux-arm64\n`,
    );
  });

  it("install.sh installs the build and its unit under --prefix, joins with the token and starts the service", async () => {
    const fleet = await newFleet();
    const { bytes } = await publishFake();
    const token = (await hm(["--json", "enroll-tokens", "create", fleet, "--roles", "edge"])).json().token as string;
    const script = await installScript();
    const root = mkdtempSync(join(work, "root-"));
    const r = runInstall(script, ["--token", token, "--prefix", root, "--hostname", "edge-1.example.com"]);
    expect(r.status, r.stderr).toBe(0);

    const bin = join(root, "usr/local/bin/harbormaster-agent");
    expect(readFileSync(bin).equals(bytes)).toBe(true);
    expect(statSync(bin).mode & 0o777).toBe(0o755);
    const unit = readFileSync(join(root, "etc/systemd/system/harbormaster-agent.service"), "utf8");
    const packaged = readFileSync(new URL("../agent/packaging/harbormaster-agent.service", import.meta.url), "utf8");
    expect(unit).toBe(packaged.replaceAll("/usr/bin/harbormaster-agent", "/usr/local/bin/harbormaster-agent"));
    expect(unit).toContain("ExecStart=/usr/local/bin/harbormaster-agent run");

    expect(readFileSync(r.log, "utf8").split("\n").filter(Boolean)).toEqual([
      "join",
      url,
      token,
      "--hostname",
      "edge-1.example.com",
    ]);
    const enrolled = JSON.parse(readFileSync(`${r.log}.answer`, "utf8"));
    expect(enrolled).toMatchObject({ fleet, hostname: "edge-1.example.com", roles: ["edge"] });
    expect(readFileSync(r.systemctlLog, "utf8").split("\n").filter(Boolean)).toEqual([
      "daemon-reload",
      "enable --now harbormaster-agent",
    ]);
  });

  it("install.sh refuses a download whose SHA-256 does not match and installs nothing; --no-start leaves the service alone", async () => {
    await publishFake();
    const script = await installScript();
    // A curl that corrupts the build on its way (one byte more), and not the checksum line.
    const corrupt = mkdtempSync(join(work, "corrupt-"));
    writeFileSync(
      join(corrupt, "curl"),
      `#!/bin/sh\n/usr/bin/curl "$@" || exit $?\ncase "$*" in *.sha256*) ;; *) out=; prev=; for a in "$@"; do [ "$prev" = -o ] && out=$a; prev=$a; done; printf x >> "$out" ;; esac\n`,
    );
    chmodSync(join(corrupt, "curl"), 0o755);
    const root = mkdtempSync(join(work, "root-"));
    const bad = runInstall(script, ["--token", "hme.x.y", "--prefix", root], { path: corrupt });
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toContain("SHA-256");
    expect(existsSync(join(root, "usr/local/bin/harbormaster-agent"))).toBe(false);
    expect(existsSync(bad.systemctlLog)).toBe(false);

    const fleet = await newFleet();
    const token = (await hm(["--json", "enroll-tokens", "create", fleet])).json().token as string;
    const quiet = runInstall(script, ["--token", token, "--prefix", mkdtempSync(join(work, "root-")), "--no-start"]);
    expect(quiet.status, quiet.stderr).toBe(0);
    expect(readFileSync(quiet.log, "utf8")).toContain("join\n");
    expect(existsSync(quiet.systemctlLog)).toBe(false);

    const help = spawnSync("sh", ["-s", "--", "--help"], { input: readFileSync(script), encoding: "utf8" });
    expect(help.status).toBe(0);
    expect(help.stdout).toContain("usage: install.sh");
    const unknown = runInstall(script, ["--frobnicate"]);
    expect(unknown.status).not.toBe(0);
    expect(unknown.stderr).toContain("unknown option: --frobnicate");

    const refused = runInstall(script, ["--token", "hms.not-an-enrollment-token", "--prefix", root]);
    expect(refused.status).not.toBe(0);
    expect(refused.stderr).toContain("enrollment token");
  });

  it("install.sh passes shellcheck", async (ctx) => {
    if (spawnSync("shellcheck", ["--version"]).status !== 0) return ctx.skip();
    const r = spawnSync("shellcheck", ["--shell=sh", await installScript()], { encoding: "utf8" });
    expect(r.stdout + r.stderr).toBe("");
    expect(r.status).toBe(0);
  });
});
