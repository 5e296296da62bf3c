/**
 * A reboot gate's external HTTPS check is an outsider: the coordinator asks for it from its alarm
 * and takes the answer as an event of its own, so an endpoint that hangs (up to its timeout_s)
 * delays neither another group's grant nor the outbox the same alarm delivers.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { and, eq } from "drizzle-orm";
import { describe, expect, it } from "vitest";
import { getDb } from "../src/db/client";
import { auditLog } from "../src/db/schema";
import { call } from "./helpers";
import { fleetWithKey, putGroup, registerClients, until, view, zincati } from "./fleetlock-helpers";
import { coordinator, sleep } from "./support/objects";

/** The gate check's endpoint, in place of the coordinator's outbound fetch. */
const answerChecksWith = (fleet: string, answer: (url: string, init: RequestInit) => Promise<Response>) =>
  runInDurableObject(coordinator(fleet), (instance) => {
    (instance as unknown as { parts: { gates: { fetcher: unknown } } }).parts.gates.fetcher = answer;
  });

/** An endpoint that takes the connection and never answers: only the check's own timeout ends it. */
const hangs = (_url: string, init: RequestInit) =>
  new Promise<Response>((_, reject) => init.signal?.addEventListener("abort", () => reject(init.signal?.reason)));

const grantAudited = (fleet: string, serverId: string) =>
  getDb(env.DB)
    .select({ id: auditLog.id })
    .from(auditLog)
    .where(
      and(
        eq(auditLog.target, `fleet:${fleet}`),
        eq(auditLog.action, "fleetlock.grant"),
        eq(auditLog.actor, `server:${serverId}`),
      ),
    );

describe("an external gate check that hangs", () => {
  it("delays neither another group's grant nor the outbox; its answer, when it comes, reaches the parked host", async () => {
    const f = await fleetWithKey();
    const url = "https://alerts.example.com/hangs";
    const TIMEOUT_S = 5;
    await putGroup(f.fleet, "slow", {
      slots: 1,
      queue_wait_s: 30,
      gates: { external: { url, timeout_s: TIMEOUT_S, cache_s: 5 } },
    });
    // A gate that reads the index: its host waits for the alarm's read.
    await putGroup(f.fleet, "default", { slots: 2, gates: { fleet_health: { max_unhealthy: 5 } } });
    await putGroup(f.fleet, "free", { slots: 2 });
    const [s] = await registerClients(f.fleet, 1, "slow");
    const [a] = await registerClients(f.fleet, 1, "default");
    const [b] = await registerClients(f.fleet, 1, "free");
    let endpoint = hangs;
    let asked = 0;
    await answerChecksWith(f.fleet, (u, init) => {
      asked++;
      return endpoint(u, init);
    });

    // The slow group's host parks; its pre-reboot asks the alarm for the check, which hangs.
    const parked = zincati(f.baseUrl, "pre-reboot", s.id, "slow");
    await until(f.fleet, (g) => g.queue.some((q) => q.id === s.id), 5_000, "slow");
    const started = Date.now();
    while (asked === 0 && Date.now() - started < 5_000) await sleep(20);
    expect(asked, "the alarm asked the gate endpoint").toBe(1);

    // Meanwhile: a host behind the fleet-health gate (answered after the alarm's read) and one
    // with no gate, whose grant's audit row the alarm's outbox timer delivers (held up to 1 s).
    const t0 = Date.now();
    const [ra, rb] = await Promise.all([
      zincati(f.baseUrl, "pre-reboot", a.id, "default"),
      zincati(f.baseUrl, "pre-reboot", b.id, "free"),
    ]);
    const grantMs = Date.now() - t0;
    expect(ra.status).toBe(200);
    expect(rb.status).toBe(200);
    while ((await grantAudited(f.fleet, b.serverId)).length === 0 && Date.now() - t0 < 15_000) await sleep(50);
    const auditMs = Date.now() - t0;
    console.log(
      `with the gate endpoint hanging: the fleet-health host granted in ${grantMs} ms, the free host's grant audited in ${auditMs} ms (check timeout ${TIMEOUT_S} s)`,
    );
    expect(grantMs, "another group's grant waited on the hanging check").toBeLessThan(2_000);
    expect(auditMs, "the outbox waited on the hanging check").toBeLessThan(3_500);

    // The check times out: the gate stays closed and says why; the parked host still waits.
    await until(
      f.fleet,
      (g) => (g.gates as { gate: string; reason: string }[]).some((x) => /no answer within 5 s/.test(x.reason)),
      15_000,
      "slow",
    );
    expect((await view(f.fleet, "slow")).queue.map((q) => q.id)).toEqual([s.id]);

    // The endpoint answers 200 when asked again (the alarm reads every cache_s while a host waits):
    // the answer, an event of its own, grants the parked host.
    let answeredAt = 0;
    endpoint = async () => {
      answeredAt ||= Date.now();
      return new Response("ok", { status: 200 });
    };
    expect((await parked).status).toBe(200);
    console.log(`the parked host was granted ${Date.now() - answeredAt} ms after the endpoint answered 200`);
  }, 40_000);

  it("is not asked for again while under way: pre-reboots behind it do not wake the alarm", async () => {
    const f = await fleetWithKey();
    const url = "https://alerts.example.com/hangs-too";
    await putGroup(f.fleet, "default", {
      slots: 1,
      queue_wait_s: 0,
      gates: { external: { url, timeout_s: 10, cache_s: 60 } },
    });
    const [h] = await registerClients(f.fleet, 1);
    let asked = 0;
    await answerChecksWith(f.fleet, (u, init) => {
      asked++;
      return hangs(u, init);
    });
    // Counts the alarm's reads of the gates' inputs.
    await runInDurableObject(coordinator(f.fleet), (instance) => {
      const gates = (instance as unknown as { parts: { gates: { refresh: (...a: unknown[]) => Promise<void> } } }).parts
        .gates;
      const refresh = gates.refresh.bind(gates);
      (globalThis as { gateReads?: number }).gateReads = 0;
      gates.refresh = (...a) => {
        (globalThis as { gateReads?: number }).gateReads!++;
        return refresh(...a);
      };
    });
    const reads = () =>
      runInDurableObject(coordinator(f.fleet), () => (globalThis as { gateReads?: number }).gateReads ?? 0);
    expect((await zincati(f.baseUrl, "pre-reboot", h.id)).json).toMatchObject({ kind: "external_check_failed" });
    const started = Date.now();
    while (asked === 0 && Date.now() - started < 5_000) await sleep(20);
    expect(asked).toBe(1);
    const before = await reads();
    // Four more pre-reboots, over 4.5 s, while the check hangs: each is told the gate is closed.
    for (let i = 0; i < 4; i++) {
      await sleep(1_100);
      expect((await zincati(f.baseUrl, "pre-reboot", h.id)).json).toMatchObject({ kind: "external_check_failed" });
    }
    await sleep(300);
    console.log(`alarm reads while the check was under way: ${(await reads()) - before}, checks asked: ${asked}`);
    expect((await reads()) - before).toBe(0);
    expect(asked).toBe(1);
  }, 30_000);

  it("answering after its fleet was deleted stores nothing in the wiped coordinator", async () => {
    const f = await fleetWithKey();
    const url = "https://alerts.example.com/late";
    await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: 0 });
    // The fleet's default gates: kept by the coordinator beside its groups.
    const put = await call("PUT", `/v1/fleets/${f.fleet}/gates`, {
      body: { external: { url, timeout_s: 10, cache_s: 60 } },
    });
    expect(put.status).toBe(200);
    const [h] = await registerClients(f.fleet, 1);
    // The endpoint answers once told to; the answer is made in the coordinator's own context.
    let asked = false;
    let go = false;
    await answerChecksWith(f.fleet, async () => {
      asked = true;
      while (!go) await new Promise((r) => setTimeout(r, 20));
      return new Response("ok", { status: 200 });
    });
    expect((await zincati(f.baseUrl, "pre-reboot", h.id)).json).toMatchObject({ kind: "external_check_failed" });
    const started = Date.now();
    while (!asked && Date.now() - started < 5_000) await sleep(20);
    expect(asked).toBe(true);
    // The fleet is deleted while the check is under way (its task's call into the coordinator).
    await coordinator(f.fleet).forget();
    go = true;
    await sleep(300);
    const keys = await runInDurableObject(coordinator(f.fleet), (_i, state) =>
      [...state.storage.kv.list()].map(([k]) => k),
    );
    expect(keys).not.toContain("gate_inputs");
  });
});
