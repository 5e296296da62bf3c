import { env } from "cloudflare:test";
import { sql } from "drizzle-orm";
import { beforeEach, describe, expect, it } from "vitest";
import { getDb } from "../src/db/client";
import { runUpgrades } from "../src/upgrades/runner";
import { UPGRADE_STEPS, NEWEST_VERSION } from "../src/upgrades/steps";
import { ACTIVATE_CHUNK } from "../src/upgrades/steps/activate-reported-servers";
import type { UpgradeStep } from "../src/upgrades/step";
import {
  attempts,
  dataVersion,
  probeRows,
  probeStep,
  probeTable,
  resetUpgrades,
  runs,
  upgradeProbe,
} from "./upgrades-helpers";
import { scheduledRun } from "./support/objects";

const OLD_FLEET = "old-fleet";

/**
 * Index rows as the foundation release left them: hosts that reported stayed `provisioning`.
 * Ids are zero-padded so their order is their number.
 */
async function writeFoundationServers(reported: number, silent: number) {
  await env.DB.exec("DELETE FROM servers");
  const insert = (from: number, to: number, reportedGeneration: number | null) =>
    env.DB.prepare(
      `WITH RECURSIVE n(i) AS (SELECT ? UNION ALL SELECT i + 1 FROM n WHERE i < ?)
       INSERT INTO servers (id, fleet_id, hostname, kind, roles, reboot_group, state, status,
                            desired_generation, reported_generation, last_seen, created_at, updated_at)
       SELECT printf('00000000-0000-4000-8000-%012d', i), ?, printf('h%d.example.com', i), 'managed', '[]',
              'default', 'provisioning', ?, 1, ?, 1000, 1000, 1000
       FROM n`,
    ).bind(from, to, OLD_FLEET, reportedGeneration == null ? "unknown" : "realized", reportedGeneration);
  await env.DB.batch([
    ...(reported > 0 ? [insert(1, reported, 1)] : []),
    ...(silent > 0 ? [insert(reported + 1, reported + silent, null)] : []),
  ]);
}

async function stateCounts() {
  const rows = await env.DB.prepare("SELECT state, count(*) AS n FROM servers GROUP BY state ORDER BY state").all<{
    state: string;
    n: number;
  }>();
  return Object.fromEntries(rows.results.map((r) => [r.state, r.n]));
}

beforeEach(async () => {
  await probeTable();
  await resetUpgrades(NEWEST_VERSION);
});

describe("data version of a fresh install", () => {
  it("starts at the newest version, so the API is not drained", async () => {
    expect(await dataVersion()).toBe(NEWEST_VERSION);
    expect(await runUpgrades(env, { trigger: "cron" })).toMatchObject({ outcome: "up_to_date" });
    expect(await runs()).toEqual([]);
  });
});

describe("upgrade runner", () => {
  it("applies every step from the oldest version to the newest in one scheduled run, and the data reads back right", async () => {
    const reported = ACTIVATE_CHUNK * 2 + 50; // three chunks
    await writeFoundationServers(reported, 7);
    await resetUpgrades(0);

    await scheduledRun();

    expect(await dataVersion()).toBe(NEWEST_VERSION);
    expect(await stateCounts()).toEqual({ active: reported, provisioning: 7 });
    const history = await attempts();
    expect(history.map((a) => [a.version, a.state])).toEqual(UPGRADE_STEPS.map((s) => [s.version, "applied"]));
    expect(history[0].chunks).toBe(3);
    expect(await runs()).toMatchObject([{ state: "succeeded", from_version: 0, to_version: NEWEST_VERSION }]);
  });

  it("skips from version 0 over every later step in order", async () => {
    await writeFoundationServers(3, 1);
    await resetUpgrades(0);
    const steps = [...UPGRADE_STEPS, probeStep(NEWEST_VERSION + 1), probeStep(NEWEST_VERSION + 2, { chunks: 2 })];

    const out = await runUpgrades(env, { trigger: "cron", steps });

    expect(out).toMatchObject({ outcome: "applied", from: 0, applied: steps.map((s) => s.version) });
    expect(await dataVersion()).toBe(NEWEST_VERSION + 2);
    expect(await probeRows()).toEqual([
      { step: NEWEST_VERSION + 1, n: 1 },
      { step: NEWEST_VERSION + 2, n: 1 },
      { step: NEWEST_VERSION + 2, n: 2 },
    ]);
    expect((await attempts()).map((a) => a.version)).toEqual(steps.map((s) => s.version));
    expect(await stateCounts()).toEqual({ active: 3, provisioning: 1 });
  });

  it("leaves the version where it was when a step throws half-way, records why, and the next run resumes and repairs it", async () => {
    let broken = true;
    const flaky = probeStep(NEWEST_VERSION + 1, { chunks: 3, failAtChunk: () => (broken ? 2 : null) });
    const steps = [...UPGRADE_STEPS, flaky];

    const failed = await runUpgrades(env, { trigger: "cron", steps });

    expect(failed).toMatchObject({ outcome: "failed", failed_step: NEWEST_VERSION + 1, version: NEWEST_VERSION });
    expect(await dataVersion()).toBe(NEWEST_VERSION);
    expect(await probeRows()).toEqual([{ step: NEWEST_VERSION + 1, n: 1 }]);
    expect(await attempts()).toMatchObject([
      {
        version: NEWEST_VERSION + 1,
        state: "failed",
        chunks: 1,
        error: `probe step ${NEWEST_VERSION + 1} broke at chunk 2`,
      },
    ]);
    expect(await runs()).toMatchObject([{ state: "failed", to_version: NEWEST_VERSION }]);
    expect((await runs())[0].error).toContain("broke at chunk 2");

    broken = false;
    const repaired = await runUpgrades(env, { trigger: "cron", steps });

    expect(repaired).toMatchObject({ outcome: "applied", applied: [NEWEST_VERSION + 1] });
    expect(await dataVersion()).toBe(NEWEST_VERSION + 1);
    // Chunk 1 committed with its cursor, so the retry starts at chunk 2 and nothing repeats.
    expect((await probeRows()).map((r) => r.n)).toEqual([1, 2, 3]);
    expect((await attempts()).map((a) => a.state)).toEqual(["failed", "applied"]);
  });

  it("commits nothing of a step whose batch fails part-way through", async () => {
    let broken = true;
    const step: UpgradeStep = {
      version: NEWEST_VERSION + 1,
      description: "writes, then hits a constraint",
      async chunk({ db }) {
        return {
          statements: [
            db.insert(upgradeProbe).values({ step: NEWEST_VERSION + 1, n: 1 }),
            db.insert(upgradeProbe).values({ step: NEWEST_VERSION + 1, n: broken ? (null as unknown as number) : 2 }),
          ],
          next: null,
        };
      },
    };
    const failed = await runUpgrades(env, { trigger: "cron", steps: [...UPGRADE_STEPS, step] });
    expect(failed).toMatchObject({ outcome: "failed" });
    expect((failed as { error: string }).error).toMatch(/NOT NULL/);
    expect(await probeRows()).toEqual([]);
    expect(await dataVersion()).toBe(NEWEST_VERSION);

    broken = false;
    expect(await runUpgrades(env, { trigger: "cron", steps: [...UPGRADE_STEPS, step] })).toMatchObject({
      outcome: "applied",
    });
    expect(await probeRows()).toHaveLength(2);
  });

  it("changes nothing when an applied step runs again", async () => {
    await writeFoundationServers(5, 2);
    await resetUpgrades(0);
    await runUpgrades(env, { trigger: "cron" });
    const before = (await env.DB.prepare("SELECT * FROM servers ORDER BY id").all()).results;

    // As if the version bump had been lost: the step meets data it already upgraded.
    await resetUpgrades(0);
    const again = await runUpgrades(env, { trigger: "cron", clock: () => Date.now() + 60_000 });

    expect(again).toMatchObject({ outcome: "applied" });
    expect((await env.DB.prepare("SELECT * FROM servers ORDER BY id").all()).results).toEqual(before);
    // And with the version current, a run does nothing and leaves no trace.
    expect(await runUpgrades(env, { trigger: "cron" })).toMatchObject({ outcome: "up_to_date" });
    expect(await runs()).toHaveLength(1);
  });

  it("rejects a step list that does not climb one version at a time", async () => {
    const { checkStepList } = await import("../src/upgrades/step");
    expect(() => checkStepList([probeStep(1), probeStep(3)])).toThrow(/expected 2/);
  });
});

describe("upgrade lease", () => {
  it("lets only one of two scheduled runs started together apply the steps; the other backs off", async () => {
    const slow = probeStep(NEWEST_VERSION + 1, { chunks: 2, delayMs: 100 });
    const steps = [...UPGRADE_STEPS, slow];

    const outcomes = await Promise.all([
      runUpgrades(env, { trigger: "cron", steps }),
      runUpgrades(env, { trigger: "cron", steps }),
    ]);

    expect(outcomes.map((o) => o.outcome).sort()).toEqual(["applied", "lease_held"]);
    const held = outcomes.find((o) => o.outcome === "lease_held") as { holder: { id: number } };
    const won = outcomes.find((o) => o.outcome === "applied") as { run_id: number };
    expect(held.holder.id).toBe(won.run_id);
    expect(await probeRows()).toEqual([
      { step: NEWEST_VERSION + 1, n: 1 },
      { step: NEWEST_VERSION + 1, n: 2 },
    ]);
    expect(await attempts()).toHaveLength(1);
  });

  it("applies each real step exactly once when two cron ticks start together from version 0", async () => {
    await writeFoundationServers(ACTIVATE_CHUNK + 10, 3);
    await resetUpgrades(0);

    await Promise.all([scheduledRun(), scheduledRun()]);

    expect(await dataVersion()).toBe(NEWEST_VERSION);
    expect((await attempts()).map((a) => [a.version, a.state])).toEqual(
      UPGRADE_STEPS.map((s) => [s.version, "applied"]),
    );
    expect(await runs()).toHaveLength(1);
    const applied = await env.DB.prepare(
      "SELECT count(*) AS n FROM audit_log WHERE action = 'upgrade.step.applied' AND json_extract(details, '$.run_id') = ?",
    )
      .bind((await runs())[0].id)
      .first<number>("n");
    expect(applied).toBe(UPGRADE_STEPS.length);
    expect(await stateCounts()).toEqual({ active: ACTIVATE_CHUNK + 10, provisioning: 3 });
  });

  it("takes over a lease whose holder stopped heartbeating, and records the takeover", async () => {
    const now = Date.now();
    await resetUpgrades(NEWEST_VERSION);
    const dead = await env.DB.prepare(
      "INSERT INTO upgrade_runs (runner, state, from_version, started_at, heartbeat_at) VALUES ('cron:dead', 'running', ?, ?, ?) RETURNING id",
    )
      .bind(NEWEST_VERSION, now - 600_000, now - 300_000)
      .first<number>("id");
    await env.DB.prepare(
      "INSERT INTO upgrade_steps (run_id, version, description, runner, state, started_at) VALUES (?, ?, 'probe', 'cron:dead', 'running', ?)",
    )
      .bind(dead, NEWEST_VERSION + 1, now - 300_000)
      .run();

    const out = await runUpgrades(env, { trigger: "cron", steps: [...UPGRADE_STEPS, probeStep(NEWEST_VERSION + 1)] });

    expect(out).toMatchObject({ outcome: "applied", took_over_from: dead });
    const [old, mine] = await runs();
    expect(old).toMatchObject({ id: dead, state: "expired" });
    expect(old.error).toMatch(/cron:dead vanished.*taken over by cron:/);
    expect(mine).toMatchObject({ state: "succeeded", took_over_from: dead });
    expect((await attempts()).map((a) => a.state)).toEqual(["abandoned", "applied"]);
    const audit = await env.DB.prepare("SELECT * FROM audit_log WHERE action = 'upgrade.lease.takeover' AND target = ?")
      .bind(`upgrade-run:${dead}`)
      .all();
    expect(audit.results).toHaveLength(1);
    expect(await probeRows()).toHaveLength(1);
  });

  it("backs off from a holder that is still heartbeating", async () => {
    const now = Date.now();
    await env.DB.prepare(
      "INSERT INTO upgrade_runs (runner, state, from_version, started_at, heartbeat_at) VALUES ('cron:alive', 'running', ?, ?, ?)",
    )
      .bind(NEWEST_VERSION, now - 600_000, now - 5_000)
      .run();

    const out = await runUpgrades(env, { trigger: "cron", steps: [...UPGRADE_STEPS, probeStep(NEWEST_VERSION + 1)] });

    expect(out).toMatchObject({ outcome: "lease_held", holder: { runner: "cron:alive" } });
    expect(await probeRows()).toEqual([]);
    expect(await dataVersion()).toBe(NEWEST_VERSION);
  });

  it("discards the chunk of a runner whose lease was taken over while it worked", async () => {
    const hijack: UpgradeStep = {
      version: NEWEST_VERSION + 1,
      description: "slow enough to be presumed dead",
      async chunk({ db }) {
        // Another runner expires us and takes the lease before our commit lands.
        await env.DB.batch([
          env.DB.prepare("UPDATE upgrade_runs SET state = 'expired', finished_at = 1 WHERE state = 'running'"),
          env.DB.prepare(
            "INSERT INTO upgrade_runs (runner, state, from_version, started_at, heartbeat_at) VALUES ('cron:other', 'running', 0, 1, ?)",
          ).bind(Date.now()),
        ]);
        return { statements: [db.insert(upgradeProbe).values({ step: NEWEST_VERSION + 1, n: 1 })], next: null };
      },
    };

    const out = await runUpgrades(env, { trigger: "cron", steps: [...UPGRADE_STEPS, hijack] });

    expect(out).toMatchObject({ outcome: "lease_lost" });
    expect(await probeRows()).toEqual([]);
    expect(await dataVersion()).toBe(NEWEST_VERSION);
  });

  it("makes request-triggered runs wait after a failure, while the cron retries at once", async () => {
    const failing = probeStep(NEWEST_VERSION + 1, { failAtChunk: () => 1 });
    const steps = [...UPGRADE_STEPS, failing];
    expect(await runUpgrades(env, { trigger: "cron", steps })).toMatchObject({ outcome: "failed" });
    expect(await runUpgrades(env, { trigger: "request", steps })).toMatchObject({ outcome: "backing_off" });
    expect(await runUpgrades(env, { trigger: "cron", steps })).toMatchObject({ outcome: "failed" });
    expect((await attempts()).map((a) => a.state)).toEqual(["failed", "failed"]);
  });
});

describe("scheduled handler", () => {
  it("skips reconciliation while the data is below the newest version", async () => {
    const db = getDb(env.DB);
    await env.DB.exec("DELETE FROM servers");
    await writeFoundationServers(1, 0);
    await env.DB.prepare("UPDATE servers SET status = 'realized', last_seen = 1").run();
    // The lease is held by a live runner, so this tick cannot upgrade and must not reconcile.
    await resetUpgrades(0);
    await env.DB.prepare(
      "INSERT INTO upgrade_runs (runner, state, from_version, started_at, heartbeat_at) VALUES ('cron:alive', 'running', 0, ?, ?)",
    )
      .bind(Date.now(), Date.now())
      .run();
    await scheduledRun();
    expect((await db.run(sql`SELECT status FROM servers`)).results).toEqual([{ status: "realized" }]);
    expect(await dataVersion()).toBe(0);
  });
});
