import { env, evictDurableObject, runInDurableObject, SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { getDb } from "../src/db/client";
import { fleetSettings } from "../src/fleets/store";
import { planInputsOf } from "../src/planner/store";
import { BASE, breakCoordinator, call, fireTimersNow, report, settle } from "./helpers";
import { fleetWithKey, flushCoordinator, putGroup, zincati } from "./fleetlock-helpers";
import { hostReconcile } from "./rollout-helpers";
import { coordinator, ledger } from "./support/objects";
import { consoleFetch, cookiesOf, signIn } from "./console-helpers";

const AGENT = { name: "fw-agent", image: "registry.example/fw:1.0.0", version: "1.0.0" };

/** A server running the agent as desired, then reporting an image it was not asked for (drift). */
async function host(fleet: string, drifted: boolean, agent = AGENT) {
  const tag = Math.random().toString(36).slice(2, 7);
  const hostname = `fix-${tag}.example.com`;
  const s = await call("POST", "/v1/servers", {
    body: { fleet, hostname, kind: "managed", fleetlock_id: `fix-${tag}` },
  });
  if (s.status !== 201) throw new Error(`register: ${s.status} ${JSON.stringify(s.json)}`);
  await call("PUT", `/v1/servers/${s.json.id}/desired`, { body: { generation: 2, agents: [agent] } });
  const h = { id: s.json.id, token: s.json.token, hostname, fleetlockId: `fix-${tag}` };
  await hostReconcile(h);
  await settle(h.id);
  if (drifted)
    await call("PUT", "/v1/agent/inventory", {
      token: h.token,
      body: report(2, [{ name: agent.name, image: "registry.example/fw:0.9.0" }]),
    });
  return h;
}

const fix = async (fleet: string | undefined, agent?: string) => {
  const res = await call("POST", "/v1/check/server-agents/fix", { body: { fleet, agent, dry_run: false } });
  expect(res.status).toBe(200);
  return Object.fromEntries(res.json.actions.map((a: any) => [a.server, a.result]));
};

const generation = async (id: string) => (await call("GET", `/v1/servers/${id}/desired`)).json.generation;

/** The coordinator's drift-fix holds: server id → the hold's end (null: its write is known). */
const fixHolds = (fleet: string) =>
  runInDurableObject(coordinator(fleet), (_i, state) =>
    Object.fromEntries(
      [...state.storage.kv.list<{ server_id: string; until?: number | null }>({ prefix: "dhold:fix:" })].map(
        ([, h]) => [h.server_id, h.until ?? null],
      ),
    ),
  );

/**
 * Makes the next call of one of an object's parts' methods throw, once, after whatever the object
 * committed before it: the caller sees its RPC fail though the object may have done the work.
 */
const failNext = (stub: DurableObjectStub, part: string, method: string) =>
  runInDurableObject(stub, (instance) => {
    const target = (instance as any).parts[part];
    const real = target[method];
    target[method] = () => {
      target[method] = real;
      throw new Error(`simulated: ${part}.${method} failed, the answer is lost`);
    };
  });

/** Moves an object's decision clock `ms` ahead until the returned restore runs. */
async function aheadBy(stub: DurableObjectStub, ms: number) {
  await runInDurableObject(stub, (instance) => {
    const p = (instance as any).parts;
    const real = p.clock;
    p.clock = () => real() + ms;
    p.realClock = real;
  });
  return () =>
    runInDurableObject(stub, (instance) => {
      const p = (instance as any).parts;
      p.clock = p.realClock;
      delete p.realClock;
    });
}

/** A realized report as the ledger's outbox delivers it to the coordinator, possibly late. */
const realizedEvent = (fleet: string, serverId: string, extra: Record<string, unknown>) =>
  (coordinator(fleet) as any).serverHealth({
    fleet_id: fleet,
    server_id: serverId,
    hostname: "late.example.com",
    at: Date.now() - 60_000,
    boot_id: "boot-1",
    rebooted_from: null,
    realized: true,
    status: null,
    ...extra,
  } as any);

/** A fleet whose budget allows one server disrupted, a host to reboot, and a drifted server. */
async function budgetFleet() {
  const f = await fleetWithKey();
  await putGroup(f.fleet, "default", { slots: 3 });
  await call("PATCH", `/v1/fleets/${f.fleet}`, { body: { disruption_budget: { max_unavailable: 1, per_label: {} } } });
  const rebooting = await host(f.fleet, false);
  const drifted = await host(f.fleet, true);
  return { f, rebooting, drifted };
}

/** The fix's first step as the Worker takes it: the coordinator holds a unit for the server (and the write never follows). */
async function holdOnly(fleet: string, serverId: string) {
  const row = await getDb(env.DB).query.fleets.findFirst({ where: (t, { eq }) => eq(t.id, fleet) });
  const answer = await coordinator(fleet).allowFixes(
    fleetSettings(row!),
    [{ server_id: serverId, generation: 2 }],
    "test",
    "a-call-that-dies",
  );
  return answer[serverId];
}

describe("drift fixes and the disruption budget", () => {
  it("a re-issue is refused naming the budget's holders while it is spent, and one call fixes no more than it has room for", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 3 });
    await call("PATCH", `/v1/fleets/${f.fleet}`, {
      body: { disruption_budget: { max_unavailable: 1, per_label: {} } },
    });
    const rebooting = await host(f.fleet, false);
    const a = await host(f.fleet, true);
    const b = await host(f.fleet, true);
    // A host reboots: the fleet's one unit is taken, so neither fix may restart an agent.
    expect((await zincati(f.baseUrl, "pre-reboot", rebooting.fleetlockId)).status).toBe(200);
    const refused = await fix(f.fleet);
    for (const s of [a, b]) {
      expect(refused[s.id]).toMatchObject({
        ok: false,
        error: "budget_exhausted",
        blocked_by: [expect.objectContaining({ kind: "budget", servers: [rebooting.hostname], threshold: 1 })],
      });
      expect(await generation(s.id)).toBe(2);
    }

    // The reboot ends: one unit, two drifted servers: exactly one is fixed, the other names it.
    expect((await zincati(f.baseUrl, "steady-state", rebooting.fleetlockId)).status).toBe(200);
    const once = await fix(f.fleet);
    const fixed = [a, b].filter((s) => once[s.id]?.ok);
    expect(fixed).toHaveLength(1);
    const [first] = fixed;
    const other = first === a ? b : a;
    expect(once[first.id]).toMatchObject({ ok: true, outcome: "reissued", generation: 3 });
    expect(await generation(first.id)).toBe(3);
    expect(once[other.id]).toMatchObject({ ok: false, error: "budget_exhausted" });
    expect(await generation(other.id)).toBe(2);

    // The fix holds its unit until its server reports: a second call, and a host, are refused for it.
    const again = await fix(f.fleet);
    expect(again[other.id]).toMatchObject({
      ok: false,
      error: "budget_exhausted",
      blocked_by: [expect.objectContaining({ kind: "budget", servers: [first.hostname] })],
    });
    expect((await zincati(f.baseUrl, "pre-reboot", rebooting.fleetlockId)).json).toMatchObject({
      kind: "budget_exhausted",
    });

    // The fixed server reports every agent realized at the new generation: the unit frees.
    await call("PUT", "/v1/agent/inventory", { token: first.token, body: report(3, [AGENT]) });
    await settle(first.id);
    const last = await fix(f.fleet);
    expect(last[other.id]).toMatchObject({ ok: true, outcome: "reissued", generation: 3 });
    await flushCoordinator(f.fleet);
    const audit = (await call("GET", `/v1/audit?target=fleet:${f.fleet}`)).json.items;
    const fixRows = (action: string) =>
      audit
        .filter((r: any) => r.action === action && r.details.id.startsWith("fix:"))
        .map((r: any) => r.details.server_id);
    expect(fixRows("disruption.take").sort()).toEqual([first.id, other.id].sort());
    expect(fixRows("disruption.release")).toEqual([first.id]);
  });

  it("without a budget every drifted server is fixed", async () => {
    const f = await fleetWithKey();
    const a = await host(f.fleet, true);
    const b = await host(f.fleet, true);
    const done = await fix(f.fleet);
    for (const s of [a, b]) expect(done[s.id]).toMatchObject({ ok: true, outcome: "reissued" });
  });

  it("a hold whose write never came (the caller died between the two) frees at its end, and a late write is refused", async () => {
    const { f, rebooting, drifted } = await budgetFleet();
    const allowed = await holdOnly(f.fleet, drifted.id);
    expect(allowed).toMatchObject({ ok: true, deadline: expect.any(Number) });
    expect((await zincati(f.baseUrl, "pre-reboot", rebooting.fleetlockId)).json).toMatchObject({
      kind: "budget_exhausted",
    });
    // kill -9 here: no write, no release. At the hold's end the ledger is asked, and says generation 2.
    await fireTimersNow(coordinator(f.fleet), "fixhold");
    expect(await fixHolds(f.fleet)).toEqual({});
    expect((await zincati(f.baseUrl, "pre-reboot", rebooting.fleetlockId)).status).toBe(200);
    // The write, arriving past its deadline, is refused: nothing the freed unit no longer covers is written.
    const inputs = await planInputsOf(getDb(env.DB), f.fleet);
    const late = await ledger(drifted.id).applyPlan(inputs!, {
      actor: "test",
      reason: "drift fix",
      reissue: true,
      deadline: (allowed as { deadline: number }).deadline - 3 * 60_000,
    });
    expect(late).toMatchObject({ ok: false, code: "reservation_expired" });
    expect(await generation(drifted.id)).toBe(2);
    await flushCoordinator(f.fleet);
    const audit = (await call("GET", `/v1/audit?target=fleet:${f.fleet}`)).json.items;
    expect(
      audit.find((r: any) => r.action === "disruption.release" && r.details.server_id === drifted.id)?.details,
    ).toMatchObject({ why: "not written" });
  });

  it("a hold whose write came outlives its end and frees on the realized report", async () => {
    const { f, rebooting, drifted } = await budgetFleet();
    expect((await fix(f.fleet))[drifted.id]).toMatchObject({ ok: true, outcome: "reissued", generation: 3 });
    await fireTimersNow(coordinator(f.fleet), "fixhold");
    // Written (generation 3 past the 2 it saw), not realized yet: kept, with no end any more.
    expect(await fixHolds(f.fleet)).toEqual({ [drifted.id]: null });
    expect((await zincati(f.baseUrl, "pre-reboot", rebooting.fleetlockId)).json).toMatchObject({
      kind: "budget_exhausted",
    });
    await call("PUT", "/v1/agent/inventory", { token: drifted.token, body: report(3, [AGENT]) });
    await settle(drifted.id);
    expect(await fixHolds(f.fleet)).toEqual({});
    expect((await zincati(f.baseUrl, "pre-reboot", rebooting.fleetlockId)).status).toBe(200);
  });

  it("a realized report from the generation before the fix's write does not free its unit", async () => {
    const { f, rebooting, drifted } = await budgetFleet();
    expect(await holdOnly(f.fleet, drifted.id)).toMatchObject({ ok: true });
    // The host recovers by itself at generation 2 while the fix is on its way: that report is not the fix's.
    await call("PUT", "/v1/agent/inventory", { token: drifted.token, body: report(2, [AGENT]) });
    await settle(drifted.id);
    expect(Object.keys(await fixHolds(f.fleet))).toEqual([drifted.id]);
    expect((await zincati(f.baseUrl, "pre-reboot", rebooting.fleetlockId)).json).toMatchObject({
      kind: "budget_exhausted",
    });
  });

  it("once the write is known, only a realized report at its generation frees the unit, not a late or older one", async () => {
    const { f, rebooting, drifted } = await budgetFleet();
    expect((await fix(f.fleet))[drifted.id]).toMatchObject({ ok: true, outcome: "reissued", generation: 3 });
    // A realized event of generation 2 delivered late, and one queued by code that sent no generation.
    await realizedEvent(f.fleet, drifted.id, { generation: 2 });
    await realizedEvent(f.fleet, drifted.id, {});
    expect(Object.keys(await fixHolds(f.fleet))).toEqual([drifted.id]);
    expect((await zincati(f.baseUrl, "pre-reboot", rebooting.fleetlockId)).json).toMatchObject({
      kind: "budget_exhausted",
    });
    await call("PUT", "/v1/agent/inventory", { token: drifted.token, body: report(3, [AGENT]) });
    await settle(drifted.id);
    expect(await fixHolds(f.fleet)).toEqual({});
  });

  it("an event without a generation frees a hold only when the ledger says its write is realized", async () => {
    const { f, drifted } = await budgetFleet();
    expect((await fix(f.fleet))[drifted.id]).toMatchObject({ ok: true, generation: 3 });
    // The realized report reaches the ledger while its coordinator is unreachable; the event is
    // then lost (as one from older code would arrive, without its generation).
    const restore = await breakCoordinator(ledger(drifted.id));
    await call("PUT", "/v1/agent/inventory", { token: drifted.token, body: report(3, [AGENT]) });
    await restore();
    expect(Object.keys(await fixHolds(f.fleet))).toEqual([drifted.id]);
    // The event frees nothing by itself: the coordinator asks the ledger, which says generation 3 realized.
    await realizedEvent(f.fleet, drifted.id, {});
    expect(Object.keys(await fixHolds(f.fleet))).toEqual([drifted.id]);
    await fireTimersNow(coordinator(f.fleet), "fixhold");
    expect(await fixHolds(f.fleet)).toEqual({});
  });

  it("a write whose answer is lost after the ledger committed keeps the unit until the hold is settled", async () => {
    const { f, rebooting, drifted } = await budgetFleet();
    await failNext(ledger(drifted.id), "scheduler", "arm");
    const lost = (await fix(f.fleet))[drifted.id];
    expect(lost).toMatchObject({ ok: false, error: "unavailable", message: expect.stringContaining("may have") });
    expect(await generation(drifted.id)).toBe(3);
    // Written, though the caller could not know: the unit stays taken.
    expect(Object.keys(await fixHolds(f.fleet))).toEqual([drifted.id]);
    expect((await zincati(f.baseUrl, "pre-reboot", rebooting.fleetlockId)).json).toMatchObject({
      kind: "budget_exhausted",
    });
    // At the hold's end the ledger says generation 3: kept until the server reports it realized.
    await fireTimersNow(coordinator(f.fleet), "fixhold");
    expect(await fixHolds(f.fleet)).toEqual({ [drifted.id]: null });
    await call("PUT", "/v1/agent/inventory", { token: drifted.token, body: report(3, [AGENT]) });
    await settle(drifted.id);
    expect(await fixHolds(f.fleet)).toEqual({});
  });

  it("a repeat fix whose write is refused keeps the unit the write before it took", async () => {
    const { f, rebooting, drifted } = await budgetFleet();
    expect((await fix(f.fleet))[drifted.id]).toMatchObject({ ok: true, generation: 3 });
    // The host reconciles generation 3 but still runs the wrong image: drifted again, not realized.
    await call("PUT", "/v1/agent/inventory", {
      token: drifted.token,
      body: report(3, [{ name: AGENT.name, image: "registry.example/fw:0.9.0" }]),
    });
    // The second fix's write reaches the ledger past its deadline (its clock says so): refused.
    const restore = await aheadBy(ledger(drifted.id), 10 * 60_000);
    expect((await fix(f.fleet))[drifted.id]).toMatchObject({ ok: false, error: "reservation_expired" });
    await restore();
    expect(await generation(drifted.id)).toBe(3);
    // Generation 3 still restarts the server's agents: its unit is not freed by the refused repeat.
    expect(await fixHolds(f.fleet)).toEqual({ [drifted.id]: null });
    expect((await zincati(f.baseUrl, "pre-reboot", rebooting.fleetlockId)).json).toMatchObject({
      kind: "budget_exhausted",
    });
    await call("PUT", "/v1/agent/inventory", { token: drifted.token, body: report(3, [AGENT]) });
    await settle(drifted.id);
    expect(await fixHolds(f.fleet)).toEqual({});
  });

  it("a fix whose write the ledger skips frees its unit, though another writer moved the generation past the one it saw", async () => {
    const { f, rebooting, drifted } = await budgetFleet();
    // The race, held still: between the fix's read of the ledger and its write, the planner
    // issued generation 2 with newer inputs and the host already runs it (it was drifted at 2
    // in this boot and heard realized in it before, so no event goes out); the index still
    // shows the drift the fix acts on.
    await runInDurableObject(ledger(drifted.id), (instance) => {
      const p = (instance as any).parts;
      p.realFlush = p.outbox.flush;
      p.outbox.flush = async () => {};
    });
    await call("PUT", "/v1/agent/inventory", { token: drifted.token, body: report(2, [AGENT]) });
    await runInDurableObject(ledger(drifted.id), (instance) => {
      const store = (instance as any).parts.store;
      // The planner's newer inputs: the fix's own (older) ones are skipped.
      store.setPlan({ ...store.plan(), rev: store.plan().rev + 1_000 });
      // The fix's read came before the planner's write: it saw generation 1.
      const load = store.load;
      store.load = () => {
        store.load = load;
        const s = load.call(store);
        return { ...s, desired: { ...s.desired, generation: s.desired.generation - 1 } };
      };
    });
    expect((await fix(f.fleet))[drifted.id]).toMatchObject({ ok: true, outcome: "older_inputs", generation: 2 });
    await runInDurableObject(ledger(drifted.id), (instance) => {
      const p = (instance as any).parts;
      p.outbox.flush = p.realFlush;
    });
    await settle(drifted.id);
    // This call wrote nothing: the unit frees now, rather than waiting for a realized report
    // the host, realized already, will never send.
    expect(await fixHolds(f.fleet)).toEqual({});
    expect((await zincati(f.baseUrl, "pre-reboot", rebooting.fleetlockId)).status).toBe(200);
  });

  it("a ledger that skips a fix's write does not send every realized report for it afterwards", async () => {
    const { f, drifted } = await budgetFleet();
    const { deadline } = (await holdOnly(f.fleet, drifted.id)) as { ok: true; deadline: number };
    const inputs = await planInputsOf(getDb(env.DB), f.fleet);
    await runInDurableObject(ledger(drifted.id), (instance) => {
      const store = (instance as any).parts.store;
      store.setPlan({ ...store.plan(), rev: inputs!.rev + 1 });
    });
    const skipped = await ledger(drifted.id).applyPlan(inputs!, {
      actor: "test",
      reason: "drift fix",
      reissue: true,
      deadline,
    });
    expect(skipped).toMatchObject({ ok: true, outcome: "older_inputs" });
    // No fix's hold waits on this ledger's realized reports: a host flapping in this boot, heard
    // realized already, keeps them home rather than calling the coordinator each time.
    const sent = await runInDurableObject(ledger(drifted.id), (_i, state) =>
      state.storage.kv.get<{ fix_from?: number }>("health_sent"),
    );
    expect(sent?.fix_from).toBeUndefined();
  });
});

describe("a fix hold settled by its calls", () => {
  const allow = async (fleet: string, serverId: string, call: string) => {
    const row = await getDb(env.DB).query.fleets.findFirst({ where: (t, { eq }) => eq(t.id, fleet) });
    const answer = await coordinator(fleet).allowFixes(
      fleetSettings(row!),
      [{ server_id: serverId, generation: 2 }],
      "test",
      call,
    );
    return answer[serverId] as { ok: true; deadline: number };
  };
  const told = (fleet: string, call: string, server_id: string, generation: number | null) =>
    coordinator(fleet).fixOutcomes(call, [{ server_id, generation }]);

  it("frees the unit only once every call allowed to write has said it wrote nothing", async () => {
    const { f, drifted } = await budgetFleet();
    await allow(f.fleet, drifted.id, "call-a");
    await allow(f.fleet, drifted.id, "call-b");
    await told(f.fleet, "call-a", drifted.id, null);
    // call-b may still write: the unit stays.
    expect(Object.keys(await fixHolds(f.fleet))).toEqual([drifted.id]);
    // A call the hold does not know (or one told twice) changes nothing.
    await told(f.fleet, "call-a", drifted.id, null);
    await told(f.fleet, "call-c", drifted.id, null);
    expect(Object.keys(await fixHolds(f.fleet))).toEqual([drifted.id]);
    await told(f.fleet, "call-b", drifted.id, null);
    expect(await fixHolds(f.fleet)).toEqual({});
  });

  it("frees the unit at once when the written generation was reported realized before its call said it wrote", async () => {
    const { f, drifted } = await budgetFleet();
    const { deadline } = await allow(f.fleet, drifted.id, "call-a");
    const inputs = await planInputsOf(getDb(env.DB), f.fleet);
    const wrote = await ledger(drifted.id).applyPlan(inputs!, {
      actor: "test",
      reason: "drift fix",
      reissue: true,
      deadline,
    });
    expect(wrote).toMatchObject({ ok: true, outcome: "reissued" });
    // The host is quicker than the caller: its realized report of generation 3 comes first.
    await call("PUT", "/v1/agent/inventory", { token: drifted.token, body: report(3, [AGENT]) });
    await settle(drifted.id);
    expect(Object.keys(await fixHolds(f.fleet))).toEqual([drifted.id]);
    await told(f.fleet, "call-a", drifted.id, 3);
    expect(await fixHolds(f.fleet)).toEqual({});
  });

  it("keeps the unit of a write the caller says it made until that generation is realized", async () => {
    const { f, drifted } = await budgetFleet();
    const { deadline } = await allow(f.fleet, drifted.id, "call-a");
    const inputs = await planInputsOf(getDb(env.DB), f.fleet);
    await ledger(drifted.id).applyPlan(inputs!, { actor: "test", reason: "drift fix", reissue: true, deadline });
    await told(f.fleet, "call-a", drifted.id, 3);
    // Known written, no call left: no end any more, only the realized report of generation 3 frees it.
    expect(await fixHolds(f.fleet)).toEqual({ [drifted.id]: null });
    await call("PUT", "/v1/agent/inventory", { token: drifted.token, body: report(3, [AGENT]) });
    await settle(drifted.id);
    expect(await fixHolds(f.fleet)).toEqual({});
  });
});

describe("a fix across fleets", () => {
  it("answers per server when one fleet's coordinator fails, and frees what the call took there", async () => {
    const agent = { ...AGENT, name: `fw-${Math.random().toString(36).slice(2, 7)}` };
    const fleets = [];
    for (let i = 0; i < 2; i++) {
      const f = await fleetWithKey();
      await call("PATCH", `/v1/fleets/${f.fleet}`, {
        body: { disruption_budget: { max_unavailable: 1, per_label: {} } },
      });
      fleets.push({ f, drifted: await host(f.fleet, true, agent) });
    }
    const [ok, broken] = fleets;
    // The broken fleet's coordinator takes its holds, then its answer is lost.
    await failNext(coordinator(broken.f.fleet), "scheduler", "arm");
    const out = await fix(undefined, agent.name);
    expect(out[ok.drifted.id]).toMatchObject({ ok: true, outcome: "reissued", generation: 3 });
    expect(out[broken.drifted.id]).toMatchObject({ ok: false, error: "unavailable", message: expect.any(String) });
    expect(await generation(broken.drifted.id)).toBe(2);
    // Nothing was written there: the unit this call took is free again at once, not in 2 minutes.
    expect(await fixHolds(broken.f.fleet)).toEqual({});
    expect(Object.keys(await fixHolds(ok.f.fleet))).toEqual([ok.drifted.id]);
  });
});

describe("the console's fix", () => {
  it("names each server it did not fix with its error code", async () => {
    const { f, rebooting, drifted } = await budgetFleet();
    expect((await zincati(f.baseUrl, "pre-reboot", rebooting.fleetlockId)).status).toBe(200);
    const s = await signIn();
    const res = await consoleFetch(`/console/drift/fix?fleet=${f.fleet}`, {
      cookie: s.cookie,
      body: { _csrf: s.csrf, agent: "", cursor: "" },
    });
    expect(res.status).toBe(303);
    const flash = Object.entries(cookiesOf(res)).find(([name]) => name.endsWith("hm_flash"))![1].value;
    const text = JSON.parse(new TextDecoder().decode(Uint8Array.from(atob(flash), (ch) => ch.charCodeAt(0)))).text;
    expect(text).toBe(`fix applied to 1 server(s): 0 fixed, 1 not fixed: ${drifted.hostname} (budget_exhausted).`);
  });
});

describe("an operator and the bound free a fix's unit its server never realized", () => {
  /** A fix whose write is known and whose server never reports it realized. */
  async function writtenHold() {
    const b = await budgetFleet();
    expect((await fix(b.f.fleet))[b.drifted.id]).toMatchObject({ ok: true, outcome: "reissued", generation: 3 });
    await fireTimersNow(coordinator(b.f.fleet), "fixhold");
    expect(await fixHolds(b.f.fleet)).toEqual({ [b.drifted.id]: null });
    return b;
  }
  const down = (fleet: string) =>
    runInDurableObject(coordinator(fleet), (_i, state) =>
      Object.fromEntries(state.storage.kv.list<{ by_fix?: boolean }>({ prefix: "down:" })),
    );

  it("lists the hold, frees it on an operator's release (audited), and refuses a hold a call may still write under", async () => {
    const { f, rebooting, drifted } = await writtenHold();
    const listed = await call("GET", `/v1/fleets/${f.fleet}/fix-holds`);
    expect(listed.status).toBe(200);
    expect(listed.json.items).toEqual([
      expect.objectContaining({
        server: { id: drifted.id, hostname: drifted.hostname },
        state: "written",
        seen_generation: 2,
        written_generation: 3,
        settles_at: expect.any(String),
      }),
    ]);
    const res = await call("DELETE", `/v1/fleets/${f.fleet}/fix-holds/${drifted.hostname}`);
    expect(res.status).toBe(200);
    expect(res.json.released).toMatchObject({ server: { id: drifted.id }, state: "written" });
    expect(await fixHolds(f.fleet)).toEqual({});
    expect((await zincati(f.baseUrl, "pre-reboot", rebooting.fleetlockId)).status).toBe(200);
    const audit = (await call("GET", `/v1/audit?target=fleet:${f.fleet}`)).json.items;
    expect(
      audit.find((r: any) => r.action === "disruption.release" && r.details.server_id === drifted.id),
    ).toMatchObject({ actor: expect.stringMatching(/^token:|^admin/), details: { why: "operator", state: "written" } });
    // Released twice: nothing holds it any more.
    const again = await call("DELETE", `/v1/fleets/${f.fleet}/fix-holds/${drifted.id}`);
    expect(again.status).toBe(404);
    expect(again.json.error.code).toBe("not_held");

    // A hold a fix call may still write under is not the operator's to free: its write could land after.
    const other = await host(f.fleet, true);
    expect((await zincati(f.baseUrl, "steady-state", rebooting.fleetlockId)).status).toBe(200);
    expect(await holdOnly(f.fleet, other.id)).toMatchObject({ ok: true });
    const writing = await call("DELETE", `/v1/fleets/${f.fleet}/fix-holds/${other.id}`);
    expect(writing.status).toBe(409);
    expect(writing.json.error).toMatchObject({
      code: "invalid_state",
      message: expect.stringContaining("may still write"),
    });
    expect(Object.keys(await fixHolds(f.fleet))).toEqual([other.id]);
  });

  it("refuses a server it does not hold, one of another fleet and an unknown fleet, changing nothing", async () => {
    const { f, drifted } = await writtenHold();
    const elsewhere = await fleetWithKey();
    for (const [path, status, code] of [
      [`/v1/fleets/${f.fleet}/fix-holds/nope.example.com`, 404, "not_held"],
      [`/v1/fleets/${f.fleet}/fix-holds/${elsewhere.fleet}%2F${drifted.hostname}`, 404, "not_held"],
      [`/v1/fleets/${elsewhere.fleet}/fix-holds/${drifted.id}`, 404, "not_held"],
      [`/v1/fleets/no-such-fleet-x/fix-holds/${drifted.id}`, 404, "not_found"],
    ] as const) {
      const res = await call("DELETE", path);
      expect({ path, status: res.status, code: res.json.error?.code }).toEqual({ path, status, code });
    }
    expect(Object.keys(await fixHolds(f.fleet))).toEqual([drifted.id]);
  });

  it("counts a server whose written fix is not realized within the bound as failed, until it reports realized", async () => {
    const { f, rebooting, drifted } = await writtenHold();
    // The bound passes (the hold's write became known 31 minutes ago).
    await runInDurableObject(coordinator(f.fleet), (instance, state) => {
      const d = (instance as any).parts.disruption;
      const h = d.holds().get(`fix:${drifted.id}`);
      d.replaceHold({ ...h, known_at: h.known_at - 31 * 60_000 });
      expect(state.storage.kv.get(`dhold:fix:${drifted.id}`)).toBeTruthy();
    });
    await fireTimersNow(coordinator(f.fleet), "fixhold");
    expect(await fixHolds(f.fleet)).toEqual({});
    expect(await down(f.fleet)).toEqual({
      [`down:${drifted.id}`]: expect.objectContaining({ status: "failed", by_fix: true }),
    });
    // Still counted against the budget: the reboot is refused, naming the server.
    expect((await zincati(f.baseUrl, "pre-reboot", rebooting.fleetlockId)).json).toMatchObject({
      kind: "budget_exhausted",
    });
    expect((await call("GET", `/v1/fleets/${f.fleet}/fix-holds`)).json.items).toEqual([
      expect.objectContaining({ server: { id: drifted.id, hostname: drifted.hostname }, state: "counted_failed" }),
    ]);
    // Its realized report clears it, like any failed server's.
    await call("PUT", "/v1/agent/inventory", { token: drifted.token, body: report(3, [AGENT]) });
    await settle(drifted.id);
    expect(await down(f.fleet)).toEqual({});
    expect((await zincati(f.baseUrl, "pre-reboot", rebooting.fleetlockId)).status).toBe(200);
  });

  it("keeps a server its bound counted failed through news within the healthy class; a realized report frees it", async () => {
    const { f, drifted } = await writtenHold();
    await runInDurableObject(coordinator(f.fleet), (instance) => {
      const d = (instance as any).parts.disruption;
      const h = d.holds().get(`fix:${drifted.id}`);
      d.replaceHold({ ...h, known_at: h.known_at - 31 * 60_000 });
    });
    await fireTimersNow(coordinator(f.fleet), "fixhold");
    const countedFailed = { [`down:${drifted.id}`]: expect.objectContaining({ status: "failed", by_fix: true }) };
    expect(await down(f.fleet)).toEqual(countedFailed);
    // pending -> drifted reaches the coordinator only when a webhook asks for server.drifted:
    // whether the server stays counted must not depend on that.
    const now = Date.now();
    await realizedEvent(f.fleet, drifted.id, { realized: false, at: now, status: { from: "pending", to: "drifted" } });
    await realizedEvent(f.fleet, drifted.id, { realized: false, at: now, status: { from: "drifted", to: "pending" } });
    expect(await down(f.fleet)).toEqual(countedFailed);
    // A realized report is always sent while the fix waits for one, status changed or not.
    await realizedEvent(f.fleet, drifted.id, { realized: true, at: now, generation: 3, status: null });
    expect(await down(f.fleet)).toEqual({});
  });

  it("frees a server its bound counted failed once it comes back from stale or failed", async () => {
    const { f, drifted } = await writtenHold();
    await runInDurableObject(coordinator(f.fleet), (instance) => {
      const d = (instance as any).parts.disruption;
      d.setDown(drifted.id, { status: "failed", since: Date.now(), by_fix: true });
    });
    await realizedEvent(f.fleet, drifted.id, { realized: false, status: { from: "stale", to: "drifted" } });
    expect(await down(f.fleet)).toEqual({});
  });

  it("bounds a written hold stored by older code (no known_at, no timer) from when the coordinator first sees it", async () => {
    const { f, rebooting, drifted } = await writtenHold();
    const key = `dhold:fix:${drifted.id}`;
    // The hold as older code left it: its write known, no bound's start, no timer.
    await runInDurableObject(coordinator(f.fleet), (_i, state) => {
      const { known_at: _k, ...old } = state.storage.kv.get<Record<string, unknown>>(key)!;
      state.storage.kv.put(key, old);
      state.storage.sql.exec("DELETE FROM _timers WHERE name LIKE 'fixhold:%'");
    });
    await evictDurableObject(coordinator(f.fleet));
    const before = Date.now();
    const listed = (await call("GET", `/v1/fleets/${f.fleet}/fix-holds`)).json.items;
    expect(listed).toEqual([expect.objectContaining({ state: "written", settles_at: expect.any(String) })]);
    const seen = await runInDurableObject(coordinator(f.fleet), (_i, state) => ({
      known_at: state.storage.kv.get<{ known_at?: number }>(key)?.known_at,
      timer: state.storage.sql
        .exec<{ due_at: number }>("SELECT due_at FROM _timers WHERE name = ?", `fixhold:${drifted.id}`)
        .toArray()[0]?.due_at,
    }));
    expect(seen.known_at).toBeGreaterThanOrEqual(before);
    expect(seen.timer).toBe(seen.known_at! + 30 * 60_000);
    expect(Date.parse(listed[0].settles_at)).toBe(seen.timer);
    // Seen again (another wake), the bound does not start anew.
    await evictDurableObject(coordinator(f.fleet));
    expect((await call("GET", `/v1/fleets/${f.fleet}/fix-holds`)).json.items[0].settles_at).toBe(listed[0].settles_at);
    // The bound passes with the server still not realized: counted failed, as a hold of this code's is.
    await runInDurableObject(coordinator(f.fleet), (instance) => {
      const d = (instance as any).parts.disruption;
      const h = d.holds().get(`fix:${drifted.id}`);
      d.replaceHold({ ...h, known_at: h.known_at - 31 * 60_000 });
    });
    await fireTimersNow(coordinator(f.fleet), "fixhold");
    expect(await fixHolds(f.fleet)).toEqual({});
    expect(await down(f.fleet)).toEqual({
      [`down:${drifted.id}`]: expect.objectContaining({ status: "failed", by_fix: true }),
    });
    expect((await zincati(f.baseUrl, "pre-reboot", rebooting.fleetlockId)).json).toMatchObject({
      kind: "budget_exhausted",
    });
  });

  it("frees a server its bound counted failed on an operator's release", async () => {
    const { f, drifted } = await writtenHold();
    await runInDurableObject(coordinator(f.fleet), (instance) => {
      const d = (instance as any).parts.disruption;
      const h = d.holds().get(`fix:${drifted.id}`);
      d.replaceHold({ ...h, known_at: h.known_at - 31 * 60_000 });
    });
    await fireTimersNow(coordinator(f.fleet), "fixhold");
    const res = await call("DELETE", `/v1/fleets/${f.fleet}/fix-holds/${drifted.id}`);
    expect(res.status).toBe(200);
    expect(res.json.released).toMatchObject({ state: "counted_failed" });
    expect(await down(f.fleet)).toEqual({});
  });
});

describe("open console pages and the budget's fix holds", () => {
  it("are told when a fix takes a unit and when it frees, though no reboot group changed", async () => {
    const { f, drifted } = await budgetFleet();
    const s = await signIn();
    const ws = (
      await SELF.fetch(`${BASE}/console/live?fleet=${f.fleet}`, {
        headers: { Upgrade: "websocket", Cookie: s.cookie, Origin: BASE },
      })
    ).webSocket!;
    ws.accept();
    const seen: { kind: string }[] = [];
    ws.addEventListener("message", (ev) => seen.push(JSON.parse(String(ev.data))));
    // The setup's own notices go by first.
    await new Promise((r) => setTimeout(r, 1200));
    seen.length = 0;
    expect(await holdOnly(f.fleet, drifted.id)).toMatchObject({ ok: true });
    await fireTimersNow(coordinator(f.fleet), "outbox");
    await expect.poll(() => seen.map((n) => n.kind), { timeout: 3000 }).toContain("reboot");
    await new Promise((r) => setTimeout(r, 600));
    seen.length = 0;
    // Its end: nothing was written, the unit frees.
    await fireTimersNow(coordinator(f.fleet), "fixhold");
    expect(await fixHolds(f.fleet)).toEqual({});
    await fireTimersNow(coordinator(f.fleet), "outbox");
    await expect.poll(() => seen.map((n) => n.kind), { timeout: 3000 }).toContain("reboot");
    ws.close(1000, "done");
  });
});
