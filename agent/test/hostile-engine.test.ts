/**
 * A container engine that hangs (a stuck runtime, a locked store), played by a fake `podman` on
 * PATH: each command but a transfer has a short bound, the hung command's whole process group is
 * killed, and the operation fails with a message that says so, reported for its agent.
 */
import { chmodSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { reconcile } from "../driver.ts";
import { PodmanDriver } from "../drivers/index.ts";
import { handDriven, tempDir } from "./helpers.ts";

const FAKE = `#!/bin/sh
# A fake engine: logs its arguments; the verb named by HANG never returns.
echo "$*" >> "$DIR/calls"
if [ "$1" = "$HANG" ]; then echo $$ > "$DIR/hung.pid"; exec sleep 3600; fi
case "$1" in
  ps) cat "$DIR/ps.json" 2>/dev/null || echo '[]' ;;
  image) echo '[{"Id":"sha256:0000","Config":{}}]' ;;
esac
exit 0
`;

async function fakeEngine(hang: string) {
  const dir = await tempDir("hm-fake-podman-");
  const engine = join(dir, "podman");
  writeFileSync(engine, FAKE);
  chmodSync(engine, 0o755);
  const env = { ...process.env, DIR: dir, HANG: hang };
  const hungPid = () =>
    existsSync(join(dir, "hung.pid")) ? Number(readFileSync(join(dir, "hung.pid"), "utf8")) : null;
  const calls = () => readFileSync(join(dir, "calls"), "utf8").trim().split("\n");
  return { engine, env, hungPid, calls, dir };
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

const spec = (name: string) => ({ name, image: `localhost/${name}:1`, version: "1", instance_id: `i-${name}` });

let leftover: number | null = null;
afterEach(() => {
  if (leftover !== null && alive(leftover)) process.kill(leftover, "SIGKILL");
  leftover = null;
});

describe("an engine whose commands hang", () => {
  it("fails a hung start within the quick bound, kills it, and reports it for that agent only", async () => {
    const fake = await fakeEngine("start");
    // Transfers may take long (20 s here); a start may not.
    const driver = new PodmanDriver({
      engine: fake.engine,
      env: fake.env,
      commandTimeoutMs: 20_000,
      quickTimeoutMs: 1_000,
    });
    const t0 = Date.now();
    const outcome = await reconcile(
      { server_id: "s", generation: 1, lifecycle: "run", agents: [spec("a"), spec("b")] },
      driver,
    );
    // Both agents' starts hung and were given up: each within the bound, the pass goes on.
    expect(Date.now() - t0).toBeLessThan(8_000);
    expect(outcome.errors.map((e) => [e.agent, e.op])).toEqual([
      ["a", "install"],
      ["b", "install"],
    ]);
    expect(outcome.errors[0].message).toMatch(/start hm-a timed out after 1 s \(killed\)/);
    leftover = fake.hungPid();
    expect(leftover).not.toBeNull();
    expect(alive(leftover!)).toBe(false);
    // The half-made container was removed, not left behind.
    expect(fake.calls()).toContain("rm -f -t 0 hm-a");
  });

  it("fails a hung listing within the quick bound instead of holding the loop", async () => {
    const fake = await fakeEngine("ps");
    const driver = new PodmanDriver({
      engine: fake.engine,
      env: fake.env,
      commandTimeoutMs: 20_000,
      quickTimeoutMs: 1_000,
    });
    const t0 = Date.now();
    await expect(driver.list()).rejects.toThrow(/ps timed out after 1 s/);
    expect(Date.now() - t0).toBeLessThan(5_000);
    leftover = fake.hungPid();
    expect(alive(leftover!)).toBe(false);
  });

  it("lists a container whose health check never returns as failed, saying so, within the check's bound", async () => {
    const fake = await fakeEngine("healthcheck");
    writeFileSync(
      join(fake.dir, "ps.json"),
      JSON.stringify([
        {
          Id: "c1",
          Names: ["hm-web"],
          Labels: { "io.harbormaster.agent": "web", "io.harbormaster.version": "1" },
          State: "running",
          Status: "Up 5 minutes (healthy)",
        },
      ]),
    );
    const driver = new PodmanDriver({ engine: fake.engine, env: fake.env, healthTimeoutMs: 500 });
    const t0 = Date.now();
    const listed = await driver.list();
    expect(Date.now() - t0).toBeLessThan(5_000);
    expect(listed).toEqual([
      expect.objectContaining({
        name: "web",
        state: "failed",
        reason: "container hm-web is unhealthy: the healthcheck timed out after 1 s",
      }),
    ]);
    leftover = fake.hungPid();
    expect(alive(leftover!)).toBe(false);
  });

  it("still reports when the listing hangs: what it last saw, each agent flagged with the engine's failure", async () => {
    const fake = await fakeEngine("none");
    // The engine lists one running container of agent a.
    writeFileSync(
      join(fake.dir, "ps.json"),
      JSON.stringify([
        {
          Id: "c0ffee",
          Names: ["hm-a"],
          State: "running",
          Status: "Up 3 minutes",
          Labels: {
            "io.harbormaster.agent": "a",
            "io.harbormaster.image": "localhost/a:1",
            "io.harbormaster.version": "1",
            "io.harbormaster.instance": "i-a",
          },
        },
      ]),
    );
    const driver = new PodmanDriver({ engine: fake.engine, env: fake.env, quickTimeoutMs: 1_000 });
    const want = { server_id: "s", generation: 8, lifecycle: "run" as const, agents: [spec("a"), spec("b")] };
    const { s, sent, pass } = handDriven(driver, { ...want, generation: 7, agents: [spec("a")] });
    await pass();
    expect(sent[0].agents).toEqual([
      { name: "a", image: "localhost/a:1", version: "1", instance_id: "i-a", state: "running" },
    ]);
    // Then the engine stops answering `ps`, and a new config asks for agent b too.
    fake.env.HANG = "ps";
    s.desired = want;
    s.due = true;
    const t0 = Date.now();
    await pass();
    expect(Date.now() - t0).toBeLessThan(5_000);
    leftover = fake.hungPid();
    expect(sent).toHaveLength(2);
    // Said under the generation the host last reached: it did not reach 8.
    expect(sent[1].generation).toBe(7);
    expect(sent[1].agents).toEqual(sent[0].agents);
    expect(sent[1].errors).toEqual([
      {
        agent: "a",
        op: "start",
        message: expect.stringMatching(
          /^the machine could not be asked what it runs \(last seen running\): .*ps timed out after 1 s/,
        ),
      },
      {
        agent: "b",
        op: "install",
        message: expect.stringMatching(/^the machine could not be asked what it runs \(not seen installed\): /),
      },
    ]);
    // Nothing was tried on an engine that does not answer.
    expect(fake.calls().filter((c) => !c.startsWith("ps"))).toEqual([]);
  });
});

describe("an engine that hangs after the host reported the desired generation", () => {
  it("sends its errors under an older generation: one timeout settles no rollout target at the desired one", async () => {
    const fake = await fakeEngine("none");
    // Agent b's container is created but not running yet (its rollout target still waits).
    writeFileSync(
      join(fake.dir, "ps.json"),
      JSON.stringify([
        {
          Id: "c0ffee",
          Names: ["hm-b"],
          State: "created",
          Status: "Created",
          Labels: {
            "io.harbormaster.agent": "b",
            "io.harbormaster.image": "localhost/b:1",
            "io.harbormaster.version": "1",
            "io.harbormaster.instance": "i-b",
          },
        },
      ]),
    );
    const driver = new PodmanDriver({ engine: fake.engine, env: fake.env, quickTimeoutMs: 1_000 });
    const want = { server_id: "s", generation: 7, lifecycle: "run" as const, agents: [spec("b")] };
    const { s, sent, pass } = handDriven(driver, want);
    await pass();
    const reached = sent.length;
    expect(reached).toBeGreaterThan(0);
    expect(sent.map((r) => r.generation)).toEqual(sent.map(() => 7));
    expect(sent.at(-1)!.agents.map((a) => [a.name, a.state])).toEqual([["b", "stopped"]]);

    // The engine stops answering `ps`; the next pass (a heartbeat, the same desired config) cannot
    // list the machine.
    fake.env.HANG = "ps";
    s.due = true;
    await pass();
    leftover = fake.hungPid();
    expect(sent).toHaveLength(reached + 1);
    const hung = sent[reached];
    expect(hung.errors.map((e) => e.agent)).toEqual(["b"]);
    // Not at 7, where the ledger takes any error as the target's failure, settled for good.
    expect(hung.generation).toBe(6);
    expect(hung.agents).toEqual(sent[reached - 1].agents);
  });
});

describe("an engine that never answered", () => {
  it("sends no report before the machine was listed once: no claim of no agents and no assignments", async () => {
    const fake = await fakeEngine("ps");
    const driver = new PodmanDriver({ engine: fake.engine, env: fake.env, quickTimeoutMs: 1_000 });
    const { s, sent, pass } = handDriven(driver, {
      server_id: "s",
      generation: 3,
      lifecycle: "run",
      agents: [spec("a")],
    });
    // The first pass's listing hangs and is killed: nothing is known, so nothing is said; the
    // loop hears a failure (and backs off), and still owes the report.
    await expect(pass()).rejects.toThrow(/never said what it runs.*ps timed out after 1 s/);
    leftover = fake.hungPid();
    expect(sent).toEqual([]);
    expect(s.due).toBe(true);

    // Once the engine answers, the pass reports what it found and did.
    fake.env.HANG = "none";
    await pass();
    expect(sent).toHaveLength(1);
    expect(sent[0].generation).toBe(3);
  });
});
