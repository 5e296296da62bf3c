/**
 * A live rollout whose write to a server lands after an operator's desired PUT changed that
 * server's agent, the write sent before the PUT: the ledger keeps the operator's config and writes
 * nothing. The rollout must learn that at once, not wait out its server timeout for a report of
 * an image nobody is going to run.
 */
import { env, evictDurableObject, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { RolloutInput } from "../src/rollouts/schemas";
import { createRollout } from "../src/rollouts/service";
import { call, fireTimersNow, settle } from "./helpers";
import {
  AGENT,
  drain,
  fleetWithAgent,
  getRollout,
  holdLedgerWrites,
  hostReconcile,
  NEW,
  reconcileApplying,
  startRollout,
  targets,
} from "./rollout-helpers";
import { ledger, until } from "./support/objects";

describe("a rollout's write overtaken by an operator's desired PUT", () => {
  it("ends the target as skipped (superseded) at once, leaving the operator's image", async () => {
    const { fleet, hosts } = await fleetWithAgent(1);
    const [host] = hosts;
    const id = crypto.randomUUID();
    // The rollout's ledger calls wait at a gate: the write is sent, the PUT lands before it.
    const { calls, release } = await holdLedgerWrites(id);
    const input = RolloutInput.parse({ fleet, agent: AGENT, image: NEW, version: "2.0.0" });
    await createRollout(env, "test", input, () => id);
    await until(async () => calls.sent > 0);
    await new Promise((r) => setTimeout(r, 5));
    const mine = "registry.example/fw:9.0.0";
    const put = await call("PUT", `/v1/servers/${host.id}/desired`, {
      body: {
        generation: 3,
        agents: [
          { name: AGENT, image: mine, version: "9.0.0" },
          { name: "logs", image: "registry.example/logs:1", version: "1" },
        ],
      },
    });
    expect(put.status).toBe(200);
    release();
    await until(async () => {
      await drain(id);
      return (await targets(id)).every((t) => t.state !== "applying" || t.generation !== null);
    });
    // The host runs what the operator asked for.
    await hostReconcile(host);
    await settle(host.id);
    const desired = (await call("GET", `/v1/servers/${host.id}/desired`)).json;
    expect(desired.agents.find((a: { name: string }) => a.name === AGENT).image).toBe(mine);
    const [t] = await targets(id);
    expect([t.state, t.reason]).toEqual(["skipped", "superseded"]);
    expect((await getRollout(id)).state).toBe("succeeded");
  });
});

/**
 * The rollout's write landed first (the target applies at its generation), then an operator's PUT
 * changed the agent before the host reported that generation: the rollout's image will never run,
 * and the ledger knows it in the PUT's own turn. Waiting for a report would hold the target (and a
 * place of the rollout's concurrency) until its server timeout, an hour by default, and then count
 * it as a timeout toward the abort rule.
 */
describe("an operator's desired PUT after a rollout's write landed", () => {
  const putAgent = (serverId: string, generation: number, image: string, version: string, logs = "1") =>
    call("PUT", `/v1/servers/${serverId}/desired`, {
      body: {
        generation,
        agents: [
          { name: AGENT, image, version },
          { name: "logs", image: `registry.example/logs:${logs}`, version: logs },
        ],
      },
    });
  const marks = (serverId: string) =>
    runInDurableObject(ledger(serverId), (_i, state) =>
      state.storage.kv.get<Record<string, { rollout_id: string; settled?: true }>>("rollout_marks"),
    );

  it("skips the target as superseded within a second, not at its server timeout", async () => {
    const { fleet, hosts } = await fleetWithAgent(2);
    const r = await startRollout({ fleet, concurrency: 1 });
    const [first] = await targets(r.id, "?state=applying");
    expect(first).toMatchObject({ generation: 3 });
    const host = hosts.find((h) => h.id === first.server_id)!;
    const mine = "registry.example/fw:9.0.0";
    const t0 = Date.now();
    expect((await putAgent(host.id, 4, mine, "9.0.0")).status).toBe(200);
    await until(async () => (await targets(r.id)).some((t) => t.server_id === host.id && t.state === "skipped"), 1_000);
    expect(Date.now() - t0).toBeLessThan(1_000);
    const t = (await targets(r.id)).find((x) => x.server_id === host.id)!;
    expect([t.state, t.reason]).toEqual(["skipped", "superseded"]);
    // Its place went to the next server, and a skip is not a failure.
    await drain(r.id);
    const other = (await targets(r.id)).find((x) => x.server_id !== host.id)!;
    expect(other.state).toBe("applying");
    // The host runs what the operator asked for; its report settles nothing more.
    await hostReconcile(host);
    await settle(host.id);
    expect((await call("GET", `/v1/servers/${host.id}/desired`)).json.agents[0].image).toBe(mine);
    await reconcileApplying(r.id, hosts);
    const done = await getRollout(r.id);
    expect(done.state).toBe("succeeded");
    expect(done.counts).toMatchObject({ done: 1, skipped: 1, timed_out: 0, failed: 0 });
  });

  it("skips the target when the PUT takes the agent away", async () => {
    const { fleet, hosts } = await fleetWithAgent(1);
    const r = await startRollout({ fleet, concurrency: 1 });
    const [host] = hosts;
    const body = { generation: 4, agents: [{ name: "logs", image: "registry.example/logs:1", version: "1" }] };
    expect((await call("PUT", `/v1/servers/${host.id}/desired`, { body })).status).toBe(200);
    await until(async () => (await targets(r.id))[0].state === "skipped", 1_000);
    expect((await targets(r.id))[0].reason).toBe("superseded");
    // Owed nothing any more: the agent's mark goes with the agent.
    expect(Object.keys((await marks(host.id)) ?? {})).not.toContain(AGENT);
    expect((await getRollout(r.id)).state).toBe("succeeded");
  });

  it("settles nothing for a PUT that leaves the agent at the rollout's image", async () => {
    const { fleet, hosts } = await fleetWithAgent(1);
    const r = await startRollout({ fleet, concurrency: 1 });
    const [host] = hosts;
    // Another agent changes; this one keeps the image and version the rollout wrote.
    expect((await putAgent(host.id, 4, NEW, "2.0.0", "2")).status).toBe(200);
    await drain(r.id);
    expect((await targets(r.id))[0]).toMatchObject({ state: "applying", generation: 3 });
    expect((await marks(host.id))?.[AGENT]).toMatchObject({ rollout_id: r.id });
    expect((await marks(host.id))?.[AGENT]?.settled).toBeUndefined();
    // The host's report of the newer generation realizes the rollout's image.
    await hostReconcile(host);
    await settle(host.id);
    await drain(r.id);
    expect((await targets(r.id))[0]).toMatchObject({ state: "done" });
    expect((await getRollout(r.id)).state).toBe("succeeded");
  });

  it("leaves the outcome in the ledger's outbox, committed with the PUT, for the alarm to deliver", async () => {
    const { fleet, hosts } = await fleetWithAgent(1);
    const r = await startRollout({ fleet, concurrency: 1 });
    const [host] = hosts;
    const restore = await breakRollouts(ledger(host.id));
    expect((await putAgent(host.id, 4, "registry.example/fw:9.0.0", "9.0.0")).status).toBe(200);
    // Committed with the PUT: the mark owes nothing, the event waits in the outbox.
    expect((await marks(host.id))?.[AGENT]?.settled).toBe(true);
    const owed = await runInDurableObject(ledger(host.id), (_i, state) =>
      state.storage.sql.exec<{ kind: string }>("SELECT kind FROM _outbox WHERE kind = 'rollout_event'").toArray(),
    );
    expect(owed).toHaveLength(1);
    expect((await targets(r.id))[0].state).toBe("applying");
    // As after a kill -9 once the turn committed: a fresh object, its alarm delivers.
    await restore();
    await evictDurableObject(ledger(host.id));
    await fireTimersNow(ledger(host.id));
    await until(async () => (await targets(r.id))[0].state === "skipped", 1_000);
    expect((await targets(r.id))[0].reason).toBe("superseded");
  });
});

/** Makes every call from the ledger to a Rollout object fail, until the returned restore runs. */
async function breakRollouts(stub: DurableObjectStub) {
  const unreachable = new Proxy({}, { get: () => () => Promise.reject(new Error("simulated: rollout unreachable")) });
  const swap = (value: unknown) =>
    runInDurableObject(stub, (instance) => {
      const o = instance as unknown as { env: object };
      o.env = { ...o.env, ROLLOUT: value };
    });
  await swap(
    new Proxy(env.ROLLOUT, {
      get: (target, prop) => {
        if (prop === "get") return () => unreachable;
        const v = Reflect.get(target, prop);
        return typeof v === "function" ? v.bind(target) : v;
      },
    }),
  );
  return () => swap(env.ROLLOUT);
}
