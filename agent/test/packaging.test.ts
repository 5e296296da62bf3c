import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, inject, it } from "vitest";
import { AgentConfig } from "../cli/config.ts";
import { crashDelayMs } from "../cli/crash-backoff.ts";

const executable = inject("agentExecutable");
const deb = inject("agentDeb");
const version = inject("agentVersion");

const run = (cmd: string, args: string[], env: Record<string, string> = {}) =>
  spawnSync(cmd, args, { encoding: "utf8", env: { ...process.env, ...env } });

describe("the .deb", () => {
  // dpkg --root with chrootless maintainer scripts: a real install, into a temp root, so the
  // test changes nothing on the machine (the scripts honour DPKG_ROOT).
  const root = mkdtempSync(join(tmpdir(), "hm-deb-root-"));
  for (const d of ["info", "updates", "triggers"]) mkdirSync(join(root, "var/lib/dpkg", d), { recursive: true });
  writeFileSync(join(root, "var/lib/dpkg/status"), "");
  writeFileSync(join(root, "var/lib/dpkg/available"), "");

  it("installs with dpkg -i, and its harbormaster-agent runs", () => {
    expect(deb, "HARBORMASTER_AGENT_DEB must name the .deb of a reused build").toMatch(/\.deb$/);
    const r = run("dpkg", ["--root", root, "--force-script-chrootless", "--force-not-root", "-i", deb]);
    expect(r.status, r.stderr).toBe(0);
    const v = run(join(root, "usr/bin/harbormaster-agent"), ["version"]);
    expect(v.status, v.stderr).toBe(0);
    expect(v.stdout).toMatch(new RegExp(`^harbormaster-agent ${version.replace(/\./g, "\\.")} \\(node v24\\.`));
    const status = run("dpkg-query", ["--root", root, "-W", "-f", "${Status} ${Version}", "harbormaster-agent"]);
    expect(status.stdout).toBe(`install ok installed ${version}`);
    // Its state directory, for root only; the default configuration, a conffile the admin's edits survive.
    expect(statSync(join(root, "var/lib/harbormaster-agent")).mode & 0o777).toBe(0o700);
    expect(readFileSync(join(root, "etc/harbormaster-agent/config.yaml"), "utf8")).toMatch(/fleetlock_url/);
    expect(readFileSync(join(root, "var/lib/dpkg/info/harbormaster-agent.conffiles"), "utf8")).toBe(
      "/etc/harbormaster-agent/config.yaml\n",
    );
  });

  it("ships a unit systemd-analyze verify accepts, that never starts before join", () => {
    const unit = readFileSync(join(root, "lib/systemd/system/harbormaster-agent.service"), "utf8");
    expect(unit).toMatch(/^ConditionPathExists=\/var\/lib\/harbormaster-agent\/identity\.json$/m);
    expect(unit).toMatch(/^ExecStart=\/usr\/bin\/harbormaster-agent run$/m);
    expect(unit).toMatch(/^RestartPreventExitStatus=78$/m);
    // verify checks ExecStart's binary too: point it at the one installed in the temp root.
    const copy = join(mkdtempSync(join(tmpdir(), "hm-unit-")), "harbormaster-agent.service");
    writeFileSync(copy, unit.replace("ExecStart=/usr/bin/", `ExecStart=${root}/usr/bin/`));
    const r = run("systemd-analyze", ["verify", copy]);
    expect(r.status, r.stderr).toBe(0);
    // Unknown keys and bad values are only warnings to verify: none may be printed but, before
    // systemd 254, the two keys that grow the restart delay (the unit says why they stay).
    const systemd = Number(/^systemd (\d+)/.exec(run("systemd-analyze", ["--version"]).stdout)?.[1]);
    const warnings = (r.stdout + r.stderr).trim().split("\n").filter(Boolean);
    const known = /: Unknown key '(RestartSteps|RestartMaxDelaySec)' in section \[Service\], ignoring\.$/;
    expect(systemd >= 254 ? warnings : warnings.filter((w) => !known.test(w))).toEqual([]);
    const postinst = readFileSync(join(root, "var/lib/dpkg/info/harbormaster-agent.postinst"), "utf8");
    expect(postinst).not.toMatch(/systemctl (start|enable|restart)\b/);
  });
});

describe("the executable", () => {
  it("is one file that runs without Node installed, and says its version", () => {
    const r = run(executable, ["version"], { PATH: "/nonexistent" });
    expect(r.status, r.stderr).toBe(0);
    // Nothing on stderr: no warning about its code cache or experimental features.
    expect(r.stderr).toBe("");
    expect(r.stdout.trim()).toBe(
      `harbormaster-agent ${version} (node ${run(join(import.meta.dirname, "../../node_modules/node/bin/node"), ["--version"]).stdout.trim()}, linux-x64)`,
    );
  });
});

describe("the unit's restarts", () => {
  const unit = readFileSync(join(import.meta.dirname, "../packaging/harbormaster-agent.service"), "utf8");
  const key = (name: string) => {
    const m = new RegExp(`^${name}=(.+)$`, "m").exec(unit);
    if (!m) throw new Error(`the unit has no ${name}=`);
    return m[1];
  };
  // The spans this unit uses (systemd.time(7) has more).
  const seconds = (span: string) => {
    const m = /^(\d+)(s|min)$/.exec(span);
    if (!m) throw new Error(`not a span this test reads: ${span}`);
    return Number(m[1]) * (m[2] === "min" ? 60 : 1);
  };
  const restartSec = seconds(key("RestartSec"));
  const steps = Number(key("RestartSteps"));
  const maxDelay = seconds(key("RestartMaxDelaySec"));
  const interval = seconds(key("StartLimitIntervalSec"));
  const burst = Number(key("StartLimitBurst"));
  /** systemd 254's delay before its n-th restart in a row: RestartSec to RestartMaxDelaySec, geometric. */
  const systemd254 = (n: number) =>
    n <= 1 ? restartSec : n > steps ? maxDelay : restartSec * (maxDelay / restartSec) ** ((n - 1) / steps);
  /** How long `burst` starts take, each restart `delay(n)` after a run that crashed at once. */
  const spanOfBurst = (delay: (n: number) => number) => {
    let t = 0;
    for (let n = 1; n < burst; n++) t += delay(n);
    return t;
  };

  it("restarts a crash 5 s later, growing to 2 min over 4 restarts where systemd can (254)", () => {
    expect(key("Restart")).toBe("on-failure");
    expect([1, 2, 3, 4, 5, 6].map((n) => Math.round(systemd254(n)))).toEqual([5, 11, 24, 54, 120, 120]);
  });

  it("stops a loop that crashes before the agent's own backoff, and only that, where systemd cannot grow the delay", () => {
    // Before 254: every restart RestartSec after a crash before the JavaScript ran; the limit trips.
    expect(spanOfBurst(() => restartSec)).toBeLessThan(interval);
    // A crash once the JavaScript ran waits its own backoff first (the least its jitter allows, at
    // the default crash_backoff): never stopped for good.
    const policy = AgentConfig.parse({}).crash_backoff;
    expect(spanOfBurst((n) => restartSec + crashDelayMs(n, policy, () => 0) / 1000)).toBeGreaterThan(interval);
    // From 254 the growing delay alone keeps a loop, however fast, under the limit.
    expect(spanOfBurst(systemd254)).toBeGreaterThan(interval);
  });
});
