import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { FleetLockClient } from "../fleetlock.ts";
import type { ReportAccepted } from "../host-api.ts";
import { AgentConfig } from "../cli/config.ts";
import { createLogger } from "../cli/log.ts";
import { RebootCoordinator, type RebootState } from "../cli/reboot.ts";
import { StateDir } from "../cli/state.ts";
import { json, scriptedServer, tempHost } from "./cli-helpers.ts";

/** The FleetLock group: grants while `free`, else 409 semaphore_full, as Harbormaster answers. */
let free = true;
const fleetlock = await scriptedServer((req, res) => {
  if (req.url?.endsWith("/v1/pre-reboot"))
    return free ? json(res, 200, {}) : json(res, 409, { kind: "semaphore_full", value: "1 of 1 slots held" });
  if (req.url?.endsWith("/v1/steady-state")) return json(res, 200, {});
  json(res, 404, { kind: "not_found", value: "" });
});
afterAll(() => fleetlock.close());

const accepted = (status: ReportAccepted["status"]) =>
  ({ server_id: "s", desired_generation: 1, status, agents: [] }) as ReportAccepted;
const paths = (host: ReturnType<typeof tempHost>) =>
  fleetlock.requests
    .filter((r) => r.url.includes(host.root.split("/").pop()!))
    .map((r) => r.url.replace(/.*\/v1\//, ""));

function setup(
  bootId = "boot-1",
  opts: { fleetlockUrl?: string | null; checkCommand?: string[]; fleetlockTimeoutMs?: number } = {},
) {
  const host = tempHost("hm-reboot");
  const marker = join(host.root, "reboot-required");
  const config = AgentConfig.parse({
    reboot: { required_file: marker, command: ["reboot-now"], check_command: opts.checkCommand ?? null },
  }).reboot;
  const state = new StateDir(host.stateDir);
  const ran: string[][] = [];
  const lines: string[] = [];
  const url =
    opts.fleetlockUrl === undefined
      ? `${fleetlock.url}/fleetlock/prod/KEY/${host.root.split("/").pop()}/`
      : opts.fleetlockUrl;
  const make = (boot: string, commandCode = 0) =>
    new RebootCoordinator({
      state,
      config,
      bootId: boot,
      fleetlock: url
        ? new FleetLockClient(url, { id: "fl-1", group: "rack-a" }, undefined, opts.fleetlockTimeoutMs)
        : null,
      log: createLogger({ level: "debug", write: (l) => lines.push(l), tty: false }),
      runCommand: async (argv) => {
        ran.push(argv);
        return { code: argv[0] === "needs-reboot" ? 0 : commandCode, output: "" };
      },
    });
  return { host, marker, state, ran, lines, make, coordinator: make(bootId) };
}

describe("reboots for plain hosts", () => {
  it("does nothing while no reboot is needed", async () => {
    const t = setup();
    await t.coordinator.tick();
    expect(paths(t.host)).toEqual([]);
    expect(t.ran).toEqual([]);
  });

  it("takes a FleetLock slot with Zincati's exact request, runs the reboot command once granted, and not before", async () => {
    const t = setup();
    writeFileSync(t.marker, "*** System restart required ***\n");
    free = false;
    await t.coordinator.tick();
    expect(t.ran).toEqual([]);
    expect(t.state.read<RebootState>("reboot.json")).toMatchObject({ phase: "requested", boot_id: "boot-1" });
    expect(t.lines.join("\n")).toMatch(/slot refused.*kind=semaphore_full/);
    free = true;
    await t.coordinator.tick();
    expect(t.ran).toEqual([["reboot-now"]]);
    expect(t.state.read<RebootState>("reboot.json")).toMatchObject({ phase: "granted", boot_id: "boot-1" });
    const req = fleetlock.requests.filter((r) => r.url.endsWith("/v1/pre-reboot")).at(-1)!;
    expect(req.headers["fleet-lock-protocol"]).toBe("true");
    expect(req.body.toString()).toBe('{\n  "client_params": {\n    "id": "fl-1",\n    "group": "rack-a"\n  }\n}');
    expect(paths(t.host)).toEqual(["pre-reboot", "pre-reboot"]);
  });

  it("after the boot (a new boot id) releases the slot on the first healthy report, and only then", async () => {
    const t = setup();
    writeFileSync(t.marker, "");
    await t.coordinator.tick();
    expect(t.ran).toHaveLength(1);
    // The machine reboots: the marker (in /run) is gone, the agent starts with a new boot id.
    const { rmSync } = await import("node:fs");
    rmSync(t.marker);
    const after = t.make("boot-2");
    expect(after.pending).toBe(true);
    await after.tick();
    await after.onReported(accepted("drifted"));
    expect(paths(t.host)).toEqual(["pre-reboot"]);
    await after.onReported(accepted("realized"));
    expect(paths(t.host)).toEqual(["pre-reboot", "steady-state"]);
    expect(t.state.read("reboot.json")).toBe(null);
    expect(after.pending).toBe(false);
    await after.tick();
    expect(t.ran).toHaveLength(1);
  });

  it("converges after a crash between the grant and the reboot: asks again (the lock is recursive) and reboots", async () => {
    const t = setup();
    writeFileSync(t.marker, "");
    t.state.write("reboot.json", { phase: "granted", boot_id: "boot-1", since: new Date().toISOString() });
    const restarted = t.make("boot-1");
    expect(restarted.pending).toBe(false);
    await restarted.tick();
    expect(paths(t.host)).toEqual(["pre-reboot"]);
    expect(t.ran).toEqual([["reboot-now"]]);
  });

  it("tries the reboot command again at the next look when it failed", async () => {
    const t = setup();
    writeFileSync(t.marker, "");
    const failing = t.make("boot-1", 1);
    await failing.tick();
    expect(t.lines.join("\n")).toMatch(/<3>reboot: the reboot command failed/);
    await failing.tick();
    expect(t.ran).toEqual([["reboot-now"], ["reboot-now"]]);
  });

  it("asks the configured check command when there is no marker file", async () => {
    const t = setup("boot-1", { checkCommand: ["needs-reboot"] });
    await t.coordinator.tick();
    expect(t.ran).toEqual([["needs-reboot"], ["reboot-now"]]);
  });

  it("never reboots without a FleetLock URL, and says so once", async () => {
    const t = setup("boot-1", { fleetlockUrl: null });
    writeFileSync(t.marker, "");
    await t.coordinator.tick();
    await t.coordinator.tick();
    expect(t.ran).toEqual([]);
    expect(t.lines.filter((l) => l.includes("no reboot.fleetlock_url"))).toHaveLength(1);
    expect(existsSync(join(t.host.stateDir, "reboot.json"))).toBe(false);
  });
});

describe("a reboot.json a crash or a disk left unreadable", () => {
  it("does not crash the agent: it releases any slot this host holds on the first healthy report, which removes the file", async () => {
    const t = setup();
    t.state.ensure();
    writeFileSync(join(t.host.stateDir, "reboot.json"), '{"phase":"gran');
    const c = t.make("boot-1");
    expect(c.pending).toBe(true);
    expect(t.lines.join("\n")).toMatch(/reboot\.json cannot be read \(not JSON.*releasing any slot/);
    // Nothing is asked for while the slot may be held.
    writeFileSync(t.marker, "*** System restart required ***\n");
    await c.tick();
    expect(paths(t.host)).toEqual([]);
    await c.onReported(accepted("pending"));
    expect(paths(t.host)).toEqual([]);
    await c.onReported(accepted("realized"));
    expect(paths(t.host)).toEqual(["steady-state"]);
    expect(existsSync(join(t.host.stateDir, "reboot.json"))).toBe(false);
    // Then it is a host like any other: the marker asks for a slot.
    await c.tick();
    expect(paths(t.host)).toEqual(["steady-state", "pre-reboot"]);
  });
});

describe("a FleetLock server that takes the call and never answers", () => {
  it("fails each call within its bound: the coordinator asks again, and gives the slot back once it answers", async () => {
    let answering = false;
    const hanging = await scriptedServer((req, res) => {
      if (answering) return json(res, 200, {});
      // Held open, never answered (a stuck proxy): only the client's bound ends it.
      res.on("close", () => {});
    });
    const t = setup("boot-1", { fleetlockUrl: `${hanging.url}/fleetlock/prod/KEY/`, fleetlockTimeoutMs: 500 });
    try {
      writeFileSync(t.marker, "*** System restart required ***\n");
      const bound = new Promise((_, fail) =>
        setTimeout(() => fail(new Error("the tick still hangs after 5 s")), 5_000),
      );
      await Promise.race([t.coordinator.tick(), bound]);
      expect(t.lines.join("\n")).toMatch(/FleetLock call failed.*timed out after 500 ms/);
      expect(t.ran).toEqual([]);
      // Not stuck: the next tick asks again (and is granted once the server answers).
      answering = true;
      await t.coordinator.tick();
      expect(t.ran).toEqual([["reboot-now"]]);
      expect(hanging.requests.map((r) => r.url.replace(/.*\/v1\//, ""))).toEqual(["pre-reboot", "pre-reboot"]);

      // After the reboot, the slot's release hangs once: tried again at the next report.
      answering = false;
      const after = t.make("boot-2");
      await after.tick();
      await after.onReported(accepted("realized"));
      expect(t.lines.join("\n")).toMatch(/steady-state failed.*timed out after 500 ms/);
      expect(existsSync(join(t.host.stateDir, "reboot.json"))).toBe(true);
      answering = true;
      await after.onReported(accepted("realized"));
      expect(existsSync(join(t.host.stateDir, "reboot.json"))).toBe(false);
    } finally {
      await hanging.close();
    }
  });
});

describe("a FleetLock behind an ingress that answers with a 307 or 308 to where it is", () => {
  it("follows it as Zincati does: the same POST taken there, its answer the lock's, the slot released the same way", async () => {
    // An ingress that answers every call with a redirect to the FleetLock (say http:// to https://).
    let hostDir = "";
    let status = 308;
    const ingress = await scriptedServer((req, res) => {
      res.writeHead(status, {
        location: `${fleetlock.url}/fleetlock/prod/KEY/${hostDir}/${req.url.replace(/.*\/v1\//, "v1/")}`,
      });
      res.end();
    });
    const t = setup("boot-1", { fleetlockUrl: `${ingress.url}/fleetlock/prod/KEY/` });
    hostDir = t.host.root.split("/").pop()!;
    try {
      writeFileSync(t.marker, "*** System restart required ***\n");
      await t.coordinator.tick();
      expect(t.ran).toEqual([["reboot-now"]]);
      const taken = fleetlock.requests.filter((r) => r.url.includes(hostDir)).at(-1)!;
      expect(taken.method).toBe("POST");
      expect(taken.headers["fleet-lock-protocol"]).toBe("true");
      expect(JSON.parse(taken.body.toString())).toEqual({ client_params: { id: "fl-1", group: "rack-a" } });

      status = 307;
      const { rmSync } = await import("node:fs");
      rmSync(t.marker);
      const after = t.make("boot-2");
      await after.onReported(accepted("realized"));
      expect(paths(t.host)).toEqual(["pre-reboot", "steady-state"]);
      expect(existsSync(join(t.host.stateDir, "reboot.json"))).toBe(false);
      expect(ingress.requests.map((r) => r.url.replace(/.*\/v1\//, ""))).toEqual(["pre-reboot", "steady-state"]);
    } finally {
      await ingress.close();
    }
  });
});

describe("a FleetLock answer that is a redirect the same request cannot follow", () => {
  it("is refused: a 301, 302 or 303 (a GET there) or a non-http URL takes no slot and reboots nothing", async () => {
    // Grants everything to anyone, a GET included (a login page's 200).
    const other = await scriptedServer((req, res) => json(res, 200, {}));
    const answers: [number, string][] = [
      [301, `${other.url}/fleetlock/`],
      [302, `${other.url}/fleetlock/`],
      [303, `${other.url}/fleetlock/`],
      [307, "data:,{}"],
    ];
    for (const [status, location] of answers) {
      const redirecting = await scriptedServer((req, res) => {
        res.writeHead(status, { location });
        res.end();
      });
      const t = setup("boot-1", { fleetlockUrl: `${redirecting.url}/fleetlock/prod/KEY/` });
      try {
        writeFileSync(t.marker, "*** System restart required ***\n");
        await t.coordinator.tick();
        expect(t.ran).toEqual([]);
        expect(t.lines.join("\n")).toMatch(
          new RegExp(`slot refused.*kind=redirected.*answered ${status} with a redirect`),
        );
      } finally {
        await redirecting.close();
      }
    }
    expect(other.requests).toEqual([]);
    await other.close();
  });

  it("is refused after ten in a row, not followed round a loop for ever", async () => {
    const looping = await scriptedServer((req, res) => {
      res.writeHead(307, { location: req.url });
      res.end();
    });
    const t = setup("boot-1", { fleetlockUrl: `${looping.url}/fleetlock/prod/KEY/` });
    try {
      writeFileSync(t.marker, "");
      await t.coordinator.tick();
      expect(t.ran).toEqual([]);
      expect(t.lines.join("\n")).toMatch(/slot refused.*kind=redirected.*more than 10 redirects in a row/);
      expect(looping.requests).toHaveLength(11);
    } finally {
      await looping.close();
    }
  });
});
