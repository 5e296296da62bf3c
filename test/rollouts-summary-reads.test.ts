/**
 * What one rollout summary (GET /v1/rollouts/{id}, every long-poll wake, every control's answer)
 * reads of the Rollout object's storage: the targets' counts per phase, and nothing it read before
 * and nobody changed since — each phase's first hostnames (fixed at creation) and the analysis
 * samples (kept by their one writer as they are added).
 */
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { call } from "./helpers";
import { drain, fleetWithAgent, rolloutStub, startRollout } from "./rollout-helpers";

type Parts = {
  parts: {
    store: {
      samples: {
        add(phase: number, seq: number, at: number, r: unknown[]): void;
      };
    };
  };
  summary(): { analysis: { phase: number; seq: number; name: string }[]; steps: { servers: string[] }[] };
};

/** Statements and rows read by one summary of the object (its cursors consumed, as the RPC does). */
async function summaryReads(id: string) {
  return runInDurableObject(rolloutStub(id), (instance: unknown, state) => {
    const sql = state.storage.sql;
    const exec = sql.exec;
    const cursors: { rowsRead: number }[] = [];
    sql.exec = ((query: string, ...b: unknown[]) => {
      const c = exec.call(sql, query, ...b);
      cursors.push(c);
      return c;
    }) as typeof sql.exec;
    try {
      const s = (instance as Parts).summary();
      return { statements: cursors.length, rowsRead: cursors.reduce((a, c) => a + c.rowsRead, 0), summary: s };
    } finally {
      sql.exec = exec;
    }
  });
}

const addSamples = (id: string, phase: number, from: number, n: number) =>
  runInDurableObject(rolloutStub(id), (instance: unknown) => {
    const samples = (instance as Parts).parts.store.samples;
    for (let seq = from; seq < from + n; seq++)
      samples.add(phase, seq, Date.now(), [
        { check: 0, name: "realized", ok: true, value: 100, threshold: 100, detail: `${seq}` },
      ]);
  });

describe("a rollout summary's reads", () => {
  it("reads only the phases' counts once what it shows is known, and shows every new sample", async () => {
    const { fleet } = await fleetWithAgent(8, { server: (i) => ({ labels: { zone: `z${i % 4}` } }) });
    const r = await startRollout({
      fleet,
      strategy: {
        steps: [
          { type: "canary", count: 1 },
          { type: "analysis", bake_s: 3600, checks: [{ kind: "realized" }] },
          { type: "wave", percent: 100, by: "zone" },
        ],
      },
    });
    await drain(r.id);
    await addSamples(r.id, 1, 1_000, 600);
    const first = await summaryReads(r.id);
    const steady = await summaryReads(r.id);
    const phases = steady.summary.steps.length;
    console.log(
      `rollout summary, ${phases} phases, 8 targets, 600+ samples: first after a wake ${first.statements} statements ` +
        `/ ${first.rowsRead} rows read; then ${steady.statements} statements / ${steady.rowsRead} rows read`,
    );
    expect(phases).toBeGreaterThanOrEqual(6);
    expect(steady.summary.analysis).toHaveLength(500);
    expect(steady.summary.steps.flatMap((s) => s.servers)).toHaveLength(8);
    // The counts per phase and state: one statement over the first pass's targets.
    expect(steady.rowsRead).toBeLessThan(50);

    // A sample added by the writer is shown at once, the oldest shown one dropped.
    await addSamples(r.id, 1, 5_000, 2);
    const after = await summaryReads(r.id);
    expect(after.summary.analysis).toHaveLength(500);
    expect(after.summary.analysis.slice(-2).map((a) => a.seq)).toEqual([5_000, 5_001]);
    expect(after.summary.analysis[0].seq).toBe(steady.summary.analysis[2].seq);
    expect(after.rowsRead).toBe(steady.rowsRead);
    // A turn undone after adding a sample: the summary shows what storage holds, not the sample.
    await runInDurableObject(rolloutStub(r.id), (instance: unknown) => {
      const store = (instance as Parts).parts.store as Parts["parts"]["store"] & { transaction(fn: () => void): void };
      expect(() =>
        store.transaction(() => {
          store.samples.add(1, 9_999, Date.now(), [
            { check: 0, name: "realized", ok: false, value: 0, threshold: 100, detail: "undone" },
          ]);
          throw new Error("refused");
        }),
      ).toThrow("refused");
    });
    expect((await summaryReads(r.id)).summary.analysis.map((a) => a.seq)).not.toContain(9_999);
    // The API answers the same.
    const api = await call("GET", `/v1/rollouts/${r.id}`);
    expect(api.json.analysis.slice(-1)[0].seq).toBe(5_001);
  }, 60_000);
});
