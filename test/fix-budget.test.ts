import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { getDb } from "../src/db/client";
import { fleetSettings } from "../src/fleets/store";
import { planInputsOf } from "../src/planner/store";
import { call, fireTimersNow, report, settle } from "./helpers";
import { fleetWithKey, flushCoordinator, putGroup, zincati } from "./fleetlock-helpers";
import { hostReconcile } from "./rollout-helpers";
import { coordinator, ledger } from "./support/objects";

const AGENT = { name: "fw-agent", image: "registry.example/fw:1.0.0", version: "1.0.0" };

/** A server running the agent as desired, then reporting an image it was not asked for (drift). */
async function host(fleet: string, drifted: boolean) {
  const tag = Math.random().toString(36).slice(2, 7);
  const hostname = `fix-${tag}.example.com`;
  const s = await call("POST", "/v1/servers", {
    body: { fleet, hostname, kind: "managed", fleetlock_id: `fix-${tag}` },
  });
  if (s.status !== 201) throw new Error(`register: ${s.status} ${JSON.stringify(s.json)}`);
  await call("PUT", `/v1/servers/${s.json.id}/desired`, { body: { generation: 2, agents: [AGENT] } });
  const h = { id: s.json.id, token: s.json.token, hostname, fleetlockId: `fix-${tag}` };
  await hostReconcile(h);
  await settle(h.id);
  if (drifted)
    await call("PUT", "/v1/agent/inventory", {
      token: h.token,
      body: report(2, [{ name: AGENT.name, image: "registry.example/fw:0.9.0" }]),
    });
  return h;
}

const fix = async (fleet: string) => {
  const res = await call("POST", "/v1/check/server-agents/fix", { body: { fleet, dry_run: false } });
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
});
