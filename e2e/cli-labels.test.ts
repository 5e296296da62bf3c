/**
 * Labels through hm: set at registration, merged by `servers patch`, shown by `servers show` and
 * the list, and used as filters by `servers ls`, `instances` and `rollout start`.
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, inject, it } from "vitest";
import { Api } from "../cli/api.ts";
import { hmRunner } from "./hm.ts";

const url = inject("hmUrl");
const admin = inject("hmAdmin");
const api = new Api(url, admin);
const hm = hmRunner(url, admin, mkdtempSync(join(tmpdir(), "hm-labels-")));

describe("hm and labels", () => {
  it("registers with labels, patches them, and filters servers and instances by them", async () => {
    const fleet = `labels-${Date.now().toString(36)}`;
    expect((await hm(["fleets", "create", fleet])).code).toBe(0);
    const reg = async (host: string, ...labels: string[]) => {
      const r = await hm([
        "--json",
        "servers",
        "register",
        "--fleet",
        fleet,
        "--hostname",
        host,
        ...labels.flatMap((l) => ["--label", l]),
      ]);
      expect(r.code, r.stderr).toBe(0);
      return r.json() as { id: string; labels: Record<string, string> };
    };
    const a = await reg("a.example.com", "zone=eu-1a", "rack=r1");
    expect(a.labels).toEqual({ rack: "r1", zone: "eu-1a" });
    await reg("b.example.com", "zone=eu-1a", "rack=r2");
    await reg("c.example.com", "zone=eu-1b");

    const names = async (...args: string[]) =>
      ((await hm(["--json", "servers", "ls", "--fleet", fleet, ...args])).json() as { hostname: string }[]).map(
        (s) => s.hostname,
      );
    expect(await names("--label", "zone=eu-1a")).toEqual(["a.example.com", "b.example.com"]);
    expect(await names("--label", "zone=eu-1a", "--label", "rack=r2")).toEqual(["b.example.com"]);
    expect(await names("--label", "rack")).toEqual(["a.example.com", "b.example.com"]);

    const table = await hm(["servers", "ls", "--fleet", fleet, "--label", "zone=eu-1b"]);
    expect(table.stdout).toMatch(/LABELS/);
    expect(table.stdout).toMatch(/c\.example\.com.*zone=eu-1b/);

    const patched = await hm([
      "servers",
      "patch",
      `${fleet}/a.example.com`,
      "--label",
      "zone=eu-1b",
      "--unlabel",
      "rack",
    ]);
    expect(patched.code, patched.stderr).toBe(0);
    expect(patched.stdout).toContain("labels zone=eu-1b");
    const shown = await hm(["servers", "show", a.id]);
    expect(shown.stdout).toMatch(/labels\s+zone=eu-1b/);
    expect(await names("--label", "zone=eu-1b")).toEqual(["a.example.com", "c.example.com"]);

    // Instances of the servers with the label (each has a desired config with one agent).
    for (const s of await api.listServers({ fleet })) {
      await api.putDesired(s.id, { generation: 2, agents: [{ name: "web", image: "reg/web:1", version: "1" }] });
    }
    const inst = await hm(["--json", "instances", "--agent", "web", "--label", "zone=eu-1a"]);
    expect(
      (inst.json() as { hostname: string; fleet: string }[]).filter((i) => i.fleet === fleet).map((i) => i.hostname),
    ).toEqual(["b.example.com"]);

    // A rollout of the servers with the label only.
    const started = await hm([
      "--json",
      "rollout",
      "start",
      "--fleet",
      fleet,
      "--agent",
      "web",
      "--image",
      "reg/web:2",
      "--version",
      "2",
      "--label",
      "zone=eu-1a",
    ]);
    expect(started.code, started.stderr).toBe(0);
    const targets = await hm(["--json", "rollout", "targets", (started.json() as { id: string }).id]);
    expect((targets.json() as { hostname: string }[]).map((t) => t.hostname)).toEqual(["b.example.com"]);

    const bad = await hm(["servers", "ls", "--label", "Zone=x"]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain("invalid_query");
    const badPatch = await hm(["servers", "patch", a.id, "--label", "zone"]);
    expect(badPatch.code).toBe(2);
  });
});
