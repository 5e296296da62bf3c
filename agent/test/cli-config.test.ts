import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../cli/config.ts";
import { createLogger, formatLine } from "../cli/log.ts";

const dir = mkdtempSync(join(tmpdir(), "hm-agent-config-"));
const file = (name: string, text: string) => {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
};

describe("the agent's configuration", () => {
  it("is all defaults when no file exists and nothing is set", () => {
    const { config, file: used } = loadConfig(null, {});
    expect(used).toBe(null);
    expect(config.state_dir).toBe("/var/lib/harbormaster-agent");
    expect(config.transport).toBe("channel");
    expect(config.reboot.command).toEqual(["systemctl", "reboot"]);
    expect(config.reboot.required_file).toBe("/var/run/reboot-required");
    expect(config.reboot.fleetlock_url).toBe(null);
    expect(config.podman.engine).toBe("podman");
  });

  it("reads YAML and JSON files, and the environment overrides them", () => {
    const yaml = file("c.yaml", "transport: http\nreboot:\n  command: [/sbin/reboot, now]\n  check_interval_s: 30\n");
    const a = loadConfig(yaml, {}).config;
    expect(a.transport).toBe("http");
    expect(a.reboot.command).toEqual(["/sbin/reboot", "now"]);
    expect(a.reboot.check_interval_s).toBe(30);
    const b = loadConfig(yaml, {
      HARBORMASTER_AGENT_TRANSPORT: "channel",
      HARBORMASTER_AGENT_REBOOT_COMMAND: '["sh","-c","echo hi"]',
      HARBORMASTER_AGENT_REPORT_INTERVAL_S: "7",
    }).config;
    expect(b.transport).toBe("channel");
    expect(b.reboot.command).toEqual(["sh", "-c", "echo hi"]);
    expect(b.report_interval_s).toBe(7);
    const c = loadConfig(file("c.json", '{"state_dir": "/srv/agent"}'), {}, { state_dir: "/tmp/flag" }).config;
    expect(c.state_dir).toBe("/tmp/flag");
    expect(loadConfig(null, { HARBORMASTER_AGENT_CONFIG: join(dir, "c.json") }).config.state_dir).toBe("/srv/agent");
  });

  it("refuses a file it cannot read or use, naming the file and the bad keys", () => {
    expect(() => loadConfig(join(dir, "missing.yaml"), {})).toThrow(ConfigError);
    expect(() => loadConfig(file("bad.json", "{nope"), {})).toThrow(/not valid JSON/);
    expect(() =>
      loadConfig(file("keys.yaml", "transport: carrier-pigeon\nreboot:\n  check_interval_s: 0\n"), {}),
    ).toThrow(/transport.*reboot\.check_interval_s|reboot\.check_interval_s.*transport/);
    expect(() => loadConfig(file("typo.yaml", "transprot: http\n"), {})).toThrow(/transprot/);
    expect(() => loadConfig(null, { HARBORMASTER_AGENT_REPORT_INTERVAL_S: "soon" })).toThrow(/report_interval_s/);
  });
});

describe("the agent's log", () => {
  it("writes one line per event with the sd-daemon priority prefix journald reads, when not on a terminal", () => {
    expect(formatLine("error", "join failed", { code: 401 })).toBe("<3>join failed code=401");
    expect(formatLine("warn", "channel closed", { reason: "going away", retry_in_s: 4 })).toBe(
      '<4>channel closed reason="going away" retry_in_s=4',
    );
    expect(formatLine("info", "hook said\nline two")).toBe("<6>hook said | line two");
    expect(formatLine("debug", "x")).toBe("<7>x");
  });

  it("shows a time and the level's word on a terminal, and drops what is below its level", () => {
    const lines: string[] = [];
    const log = createLogger({ level: "warn", tty: true, write: (l) => lines.push(l) });
    log.info("quiet");
    log.warn("loud", { n: 1 });
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^\d{4}-\d\d-\d\dT\S+Z warn  loud n=1$/);
  });
});
