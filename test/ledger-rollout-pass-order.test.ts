import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { call, report, reportingServer, settle } from "./helpers";

/**
 * A rollout's writes into one ledger go one at a time (the outbox lane), but a call past its
 * deadline frees the lane while the ledger may still take it: the rollback pass's write can land
 * first, and the forward pass's late write after it. The ledger itself must not let the older
 * pass undo the newer one.
 */
const agents = [{ name: "web", image: "web:1", version: "1" }];

describe("a ledger given a rollout's writes out of pass order", () => {
  it("keeps the rollback pass's image when the forward pass's late write lands after it", async () => {
    const { s, stub } = await reportingServer(agents);
    const rollout_id = `r-${crypto.randomUUID()}`;
    const forward = { rollout_id, pass: 0, agent: "web", image: "web:2", version: "2" };
    const first = await stub.applyRolloutImage(forward);
    expect(first).toMatchObject({ ok: true, outcome: "applied", generation: 3 });
    const back = await stub.applyRolloutImage({ rollout_id, pass: 1, agent: "web", image: "web:1", version: "1" });
    expect(back).toMatchObject({ ok: true, outcome: "applied", generation: 4 });

    const late = await stub.applyRolloutImage(forward);
    // Answered with what the ledger holds for the rollout, nothing written.
    expect(late).toMatchObject({ ok: true, outcome: "applied", generation: 4 });
    const res = await call("GET", `/v1/servers/${s.id}/desired`);
    expect(res.json).toMatchObject({ generation: 4, agents: [{ name: "web", image: "web:1", version: "1" }] });
  });

  it("keeps the rollback's image when the forward pass's late write lands after the host realized the rollback", async () => {
    const { s, stub } = await reportingServer(agents);
    const rollout_id = `r-${crypto.randomUUID()}`;
    const forward = { rollout_id, pass: 0, agent: "web", image: "web:2", version: "2" };
    expect(await stub.applyRolloutImage(forward)).toMatchObject({ ok: true, generation: 3 });
    const realize = async (generation: number, image: string) => {
      const r = await call("PUT", "/v1/agent/inventory", {
        token: s.token,
        body: report(generation, [{ name: "web", image }]),
      });
      expect(r.status).toBe(200);
      await settle(s.id);
    };
    await realize(3, "web:2");
    const back = await stub.applyRolloutImage({ rollout_id, pass: 1, agent: "web", image: "web:1", version: "1" });
    expect(back).toMatchObject({ ok: true, outcome: "applied", generation: 4 });
    // The host realizes the rollback: its mark settles.
    await realize(4, "web:1");

    const late = await stub.applyRolloutImage(forward);
    expect(late).toMatchObject({ ok: true, outcome: "applied", generation: 4 });
    const res = await call("GET", `/v1/servers/${s.id}/desired`);
    expect(res.json).toMatchObject({ generation: 4, agents: [{ name: "web", image: "web:1", version: "1" }] });
    // The settled mark owes nothing: a later report sends no outcome again.
    await realize(4, "web:1");
    const pending = await runInDurableObject(
      stub,
      (_i, state) => state.storage.sql.exec("SELECT COUNT(*) AS n FROM _outbox WHERE kind = 'rollout_event'").one().n,
    );
    expect(pending).toBe(0);
  });

  it("still takes another rollout's write after a rollback pass's", async () => {
    const { s, stub } = await reportingServer(agents);
    const a = `r-${crypto.randomUUID()}`;
    await stub.applyRolloutImage({ rollout_id: a, pass: 0, agent: "web", image: "web:2", version: "2" });
    await stub.applyRolloutImage({ rollout_id: a, pass: 1, agent: "web", image: "web:1", version: "1" });
    const other = await stub.applyRolloutImage({
      rollout_id: `r-${crypto.randomUUID()}`,
      pass: 0,
      agent: "web",
      image: "web:3",
      version: "3",
    });
    expect(other).toMatchObject({ ok: true, outcome: "applied", generation: 5 });
    const res = await call("GET", `/v1/servers/${s.id}/desired`);
    expect(res.json).toMatchObject({ generation: 5, agents: [{ image: "web:3" }] });
  });
});
