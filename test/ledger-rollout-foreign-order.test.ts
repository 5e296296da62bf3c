import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { Env } from "../src/env";
import type { ApplyRolloutImage } from "../src/rollouts/ledger-side";
import { rolloutEffects } from "../src/rollouts/effects";
import type { RolloutParts } from "../src/rollouts/parts";
import { call, reportingServer } from "./helpers";

/**
 * One rollout holds a (fleet, agent) at a time, and lets it go only once none of its targets is
 * applying; but a write it sent while its target still applied may land after its target timed
 * out, after it let go, and after the next rollout of the agent wrote the same server (a call past
 * the outbox's deadline frees the lane while the ledger may still take it). That late write must
 * not put the finished rollout's image back over the newer rollout's.
 */
const agents = [{ name: "web", image: "web:1", version: "1" }];

type Deliver = { deliver(p: unknown, s: AbortSignal): Promise<void> };

/**
 * A rollout's `apply` effect over fake parts (one target, applying, the rollout's clock at `at`)
 * and the real ledger, the ledger's call held until `release` runs when `held`.
 */
function rolloutWrite(opts: { id: string; image: string; version: string; at: number; held?: boolean }) {
  let release!: () => void;
  const gate = opts.held ? new Promise<void>((r) => (release = r)) : Promise.resolve();
  const ledgers = {
    idFromName: (n: string) => env.LEDGER.idFromName(n),
    get: (id: DurableObjectId) => ({
      applyRolloutImage: async (req: ApplyRolloutImage) => {
        await gate;
        return env.LEDGER.get(id).applyRolloutImage(req);
      },
    }),
  };
  const fakeEnv = { ...env, LEDGER: ledgers } as unknown as Env;
  const parts = {
    clock: () => opts.at,
    background: () => {},
    scheduler: { arm: async () => {} },
    outbox: { flush: async () => {} },
    store: {
      load: () => ({ spec: { id: opts.id, fleet: "f", agent: "web", image: opts.image, version: opts.version } }),
      targets: {
        get: (pass: number, server_id: string) => ({
          pass,
          server_id,
          state: "applying",
          generation: null,
          image: opts.image,
          version: opts.version,
        }),
      },
      transaction: () => {},
    },
  } as unknown as RolloutParts;
  const effects = rolloutEffects(
    () => fakeEnv,
    () => parts,
  );
  const apply = effects.apply as Deliver;
  return {
    send: (serverId: string) => apply.deliver({ pass: 0, server_id: serverId }, new AbortController().signal),
    release: () => release(),
  };
}

/** Stamps after the servers' own desired configs (an operator's PUT, which later writes must follow). */
const T = Date.now() + 60_000;

const desired = async (id: string) => (await call("GET", `/v1/servers/${id}/desired`)).json;

describe("a finished rollout's write landing after another rollout's", () => {
  it("keeps the newer rollout's image when the older one's write, sent first, lands second", async () => {
    const { s, stub } = await reportingServer(agents);
    const older = rolloutWrite({
      id: `r-${crypto.randomUUID()}`,
      image: "web:2",
      version: "2",
      at: T + 1_000,
      held: true,
    });
    const lateCall = older.send(s.id);
    // The newer rollout, started once the older let the agent go, writes the server.
    const newer = { rollout_id: `r-${crypto.randomUUID()}`, pass: 0, agent: "web", image: "web:3", version: "3" };
    expect(await stub.applyRolloutImage({ ...newer, sent_at: T + 2_000 })).toMatchObject({ ok: true, generation: 3 });
    older.release();
    await lateCall;
    expect(await desired(s.id)).toMatchObject({ generation: 3, agents: [{ name: "web", image: "web:3" }] });
  });

  it("answers the late write ok as superseded, never 'removed', and writes nothing", async () => {
    const { s, stub } = await reportingServer(agents);
    const newer = { rollout_id: `r-${crypto.randomUUID()}`, pass: 0, agent: "web", image: "web:3", version: "3" };
    await stub.applyRolloutImage({ ...newer, sent_at: T + 2_000 });
    const late = { rollout_id: `r-${crypto.randomUUID()}`, pass: 0, agent: "web", image: "web:2", version: "2" };
    expect(await stub.applyRolloutImage({ ...late, sent_at: T + 1_000 })).toEqual({ ok: true, outcome: "superseded" });
    const audits = await env.DB.prepare(
      "SELECT COUNT(*) AS n FROM audit_log WHERE target = ? AND action = 'server.desired.rollout'",
    )
      .bind(`server:${s.id}`)
      .first<{ n: number }>();
    // The newer write's row only (held back for the host's report, or already delivered).
    expect(audits!.n).toBeLessThanOrEqual(1);
    expect(await desired(s.id)).toMatchObject({ generation: 3, agents: [{ image: "web:3" }] });
  });

  it("keeps the newer rollout's choice when it found the server already at its image", async () => {
    const { s, stub } = await reportingServer(agents);
    // The newer rollout goes back to web:1, which the server still runs (the older write is not in yet).
    const newer = { rollout_id: `r-${crypto.randomUUID()}`, pass: 0, agent: "web", image: "web:1", version: "1" };
    expect(await stub.applyRolloutImage({ ...newer, sent_at: T + 2_000 })).toEqual({
      ok: true,
      outcome: "already_at_image",
    });
    // Its redelivery still says so (a "applied" would keep its target waiting for a report).
    expect(await stub.applyRolloutImage({ ...newer, sent_at: T + 2_000 })).toEqual({
      ok: true,
      outcome: "already_at_image",
    });
    const late = { rollout_id: `r-${crypto.randomUUID()}`, pass: 0, agent: "web", image: "web:2", version: "2" };
    expect(await stub.applyRolloutImage({ ...late, sent_at: T + 1_000 })).toEqual({ ok: true, outcome: "superseded" });
    expect(await desired(s.id)).toMatchObject({ generation: 2, agents: [{ image: "web:1" }] });
  });

  it("still takes the next rollout's first write after the older one's", async () => {
    const { s } = await reportingServer(agents);
    const older = rolloutWrite({ id: `r-${crypto.randomUUID()}`, image: "web:2", version: "2", at: T + 1_000 });
    await older.send(s.id);
    expect(await desired(s.id)).toMatchObject({ generation: 3, agents: [{ image: "web:2" }] });
    const newer = rolloutWrite({ id: `r-${crypto.randomUUID()}`, image: "web:3", version: "3", at: T + 2_000 });
    await newer.send(s.id);
    expect(await desired(s.id)).toMatchObject({ generation: 4, agents: [{ image: "web:3" }] });
  });

  it("takes an older rollout's rollback pass, sent after the newer rollout's write", async () => {
    const { s, stub } = await reportingServer(agents);
    const a = `r-${crypto.randomUUID()}`;
    await stub.applyRolloutImage({
      rollout_id: a,
      pass: 0,
      agent: "web",
      image: "web:2",
      version: "2",
      sent_at: T + 1_000,
    });
    const b = `r-${crypto.randomUUID()}`;
    await stub.applyRolloutImage({
      rollout_id: b,
      pass: 0,
      agent: "web",
      image: "web:3",
      version: "3",
      sent_at: T + 2_000,
    });
    // Rolled back later: the rollback claims the agent again, after the newer rollout let it go.
    const back = { rollout_id: a, pass: 1, agent: "web", image: "web:1", version: "1", sent_at: T + 3_000 };
    expect(await stub.applyRolloutImage(back)).toMatchObject({ ok: true, outcome: "applied", generation: 5 });
    expect(await desired(s.id)).toMatchObject({ generation: 5, agents: [{ image: "web:1" }] });
  });
});

describe("an operator's desired config and a rollout's write sent before it", () => {
  const put = (id: string, generation: number, image: string, version: string) =>
    call("PUT", `/v1/servers/${id}/desired`, { body: { generation, agents: [{ name: "web", image, version }] } });

  it("keeps the operator's image when the rollout's write, sent first, lands after the PUT", async () => {
    const { s, stub } = await reportingServer(agents);
    const sent = Date.now();
    await new Promise((r) => setTimeout(r, 5));
    expect((await put(s.id, 3, "web:9", "9")).status).toBe(200);
    const late = { rollout_id: `r-${crypto.randomUUID()}`, pass: 0, agent: "web", image: "web:2", version: "2" };
    expect(await stub.applyRolloutImage({ ...late, sent_at: sent })).toEqual({ ok: true, outcome: "superseded" });
    expect(await desired(s.id)).toMatchObject({ generation: 3, agents: [{ image: "web:9" }] });
  });

  it("keeps the operator's image against a retry of the rollout's own earlier write", async () => {
    const { s, stub } = await reportingServer(agents);
    const write = { rollout_id: `r-${crypto.randomUUID()}`, pass: 0, agent: "web", image: "web:2", version: "2" };
    expect(await stub.applyRolloutImage({ ...write, sent_at: Date.now() })).toMatchObject({ generation: 3 });
    expect((await put(s.id, 4, "web:9", "9")).status).toBe(200);
    // Its answer was lost: the retry leaves the operator's config as it is.
    expect(await stub.applyRolloutImage({ ...write, sent_at: Date.now() + 5 })).toMatchObject({ ok: true });
    expect(await desired(s.id)).toMatchObject({ generation: 4, agents: [{ image: "web:9" }] });
  });

  it("takes a rollout's write sent after the PUT", async () => {
    const { s, stub } = await reportingServer(agents);
    expect((await put(s.id, 3, "web:9", "9")).status).toBe(200);
    await new Promise((r) => setTimeout(r, 5));
    const write = { rollout_id: `r-${crypto.randomUUID()}`, pass: 0, agent: "web", image: "web:2", version: "2" };
    expect(await stub.applyRolloutImage({ ...write, sent_at: Date.now() })).toMatchObject({ generation: 4 });
    expect(await desired(s.id)).toMatchObject({ generation: 4, agents: [{ image: "web:2" }] });
  });

  it("keeps no settled mark of an agent the PUT took away, however many names come and go", async () => {
    const { s, stub } = await reportingServer(agents);
    const marks = () =>
      runInDurableObject(stub, (_i, state) => state.storage.kv.get<Record<string, unknown>>("rollout_marks"));
    for (let g = 3; g < 8; g++) {
      const body = { generation: g, agents: [...agents, { name: `side-${g}`, image: `side:${g}`, version: "1" }] };
      expect((await call("PUT", `/v1/servers/${s.id}/desired`, { body })).status).toBe(200);
    }
    // The agents the config has now, not every name an operator ever sent.
    expect(Object.keys((await marks()) ?? {}).sort()).toEqual(["side-7", "web"]);
    // Taken away, then back: marked again at its return (a write sent before that is older).
    const late = { rollout_id: `r-${crypto.randomUUID()}`, pass: 0, agent: "side-3", image: "side:9", version: "9" };
    const sent = Date.now();
    await new Promise((r) => setTimeout(r, 5));
    const back = { generation: 8, agents: [...agents, { name: "side-3", image: "side:3", version: "1" }] };
    expect((await call("PUT", `/v1/servers/${s.id}/desired`, { body: back })).status).toBe(200);
    expect(await stub.applyRolloutImage({ ...late, sent_at: sent })).toEqual({ ok: true, outcome: "superseded" });
  });

  it("marks nothing again for a PUT that leaves the agent's image as it was", async () => {
    const { s, stub } = await reportingServer(agents);
    const marks = () =>
      runInDurableObject(stub, (_i, state) =>
        state.storage.kv.get<Record<string, { operator_at?: number }>>("rollout_marks"),
      );
    const before = (await marks())?.web;
    await new Promise((r) => setTimeout(r, 5));
    // The same image, with another agent added: only the added agent is marked.
    const both = [...agents, { name: "logs", image: "logs:1", version: "1" }];
    expect((await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 3, agents: both } })).status).toBe(
      200,
    );
    const after = await marks();
    expect(after?.web).toEqual(before);
    expect(after?.logs?.operator_at).toBeGreaterThan(before?.operator_at ?? 0);
  });
});
