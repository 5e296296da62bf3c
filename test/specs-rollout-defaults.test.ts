import { describe, expect, it } from "vitest";
import { consoleFetch, signIn } from "./console-helpers";
import { call } from "./helpers";
import { AGENT, drain, fleetWithAgent, NEW, OLD } from "./rollout-helpers";
import { apply, diff, getSpec } from "./specs-helpers";

const CANARY_THEN_ALL = {
  steps: [
    { type: "canary", count: 1 },
    { type: "wave", percent: 100 },
  ],
  auto_rollback: true,
};

/** A spec of the fleet that declares only AGENT's channel, with `rollout` as its default. */
const specWith = (fleet: string, rollout?: unknown) => ({
  apiVersion: "harbormaster/v1",
  kind: "FleetSpec",
  fleet,
  channels: { [AGENT]: { image: OLD, version: "1.0.0", ...(rollout === undefined ? {} : { rollout }) } },
});

const start = (fleet: string, extra: Record<string, unknown> = {}) =>
  call("POST", "/v1/rollouts", { body: { fleet, agent: AGENT, image: NEW, version: "2.0.0", ...extra } });

const channelOf = async (fleet: string) => (await call("GET", `/v1/fleets/${fleet}/channels/${AGENT}`)).json;

describe("a fleet spec's default rollout per agent", () => {
  it("is stored with the channel, exported, and equal when applied again", async () => {
    const { fleet } = await fleetWithAgent(2);
    const applied = await apply(fleet, specWith(fleet, { strategy: CANARY_THEN_ALL }));
    expect(applied.status, JSON.stringify(applied.json)).toBe(200);
    const { spec } = await getSpec(fleet);
    // Parsed: the defaults of the strategy's schema are filled in, as a rollout's are.
    expect(spec.channels[AGENT]).toEqual({
      image: OLD,
      version: "1.0.0",
      rollout: { strategy: CANARY_THEN_ALL },
    });
    expect((await channelOf(fleet)).rollout).toEqual({ strategy: CANARY_THEN_ALL });
    const again = await diff(fleet, specWith(fleet, { strategy: CANARY_THEN_ALL }));
    expect(again.json.equal).toBe(true);
  });

  it("changed alone, is one channel item, writes no history row and re-plans nobody", async () => {
    const { fleet } = await fleetWithAgent(2);
    expect((await apply(fleet, specWith(fleet))).status).toBe(200);
    const history = async () => (await channelOf(fleet)).history.length;
    const before = await history();
    const d = await diff(fleet, specWith(fleet, { strategy: CANARY_THEN_ALL }));
    expect(d.json.items).toEqual([
      expect.objectContaining({
        section: "channels",
        name: AGENT,
        op: "change",
        before: { image: OLD, version: "1.0.0" },
        after: { image: OLD, version: "1.0.0", rollout: { strategy: CANARY_THEN_ALL } },
      }),
    ]);
    const applied = await apply(fleet, specWith(fleet, { strategy: CANARY_THEN_ALL }));
    expect(applied.status).toBe(200);
    expect(applied.json).toMatchObject({ changed: true, replan: { scope: "none" } });
    expect(await history()).toBe(before);
    // Left out again, the default is gone.
    expect((await apply(fleet, specWith(fleet))).json.changed).toBe(true);
    expect((await channelOf(fleet)).rollout).toBeNull();
  });

  it("refuses bad steps and URLs it may not call with their paths, and writes nothing", async () => {
    const { fleet } = await fleetWithAgent(1);
    expect((await apply(fleet, specWith(fleet))).status).toBe(200);
    const { etag } = await getSpec(fleet);
    const bad = await apply(
      fleet,
      specWith(fleet, {
        strategy: {
          steps: [
            { type: "wave", percent: 100 },
            { type: "wave", percent: 50 },
            { type: "analysis", checks: [{ kind: "https", url: "http://example.com/ok" }] },
          ],
        },
      }),
    );
    expect(bad.status).toBe(422);
    expect(bad.json.error.code).toBe("invalid_spec");
    const paths = bad.json.error.details.problems.map((p: { path: string }) => p.path);
    expect(paths).toContain(`channels.${AGENT}.rollout.strategy.steps.1`);
    expect(paths).toContain(`channels.${AGENT}.rollout.strategy.steps.2.checks.0.url`);
    expect((await getSpec(fleet)).etag).toBe(etag);
    expect((await channelOf(fleet)).rollout).toBeNull();
  });

  it("is what POST /v1/rollouts follows without a strategy; an explicit one, or null, wins", async () => {
    // A fleet per rollout: a cancelled rollout holds its agent until its applying target ends.
    const withDefault = async () => {
      const { fleet } = await fleetWithAgent(3);
      expect((await apply(fleet, specWith(fleet, { strategy: CANARY_THEN_ALL }))).status).toBe(200);
      return fleet;
    };

    const byDefault = await start(await withDefault());
    expect(byDefault.status, JSON.stringify(byDefault.json)).toBe(201);
    expect(byDefault.json.strategy_source).toBe("fleet_default");
    expect(byDefault.json.strategy).toEqual(CANARY_THEN_ALL);
    expect(byDefault.json.steps.map((s: { title: string }) => s.title)).toEqual(["canary 1", "wave 100 %"]);
    await drain(byDefault.json.id);
    const shown = (await call("GET", `/v1/rollouts/${byDefault.json.id}`)).json;
    expect(shown).toMatchObject({ strategy_source: "fleet_default", counts: { applying: 1, queued: 2 } });

    const explicit = await start(await withDefault(), { strategy: { steps: [{ type: "canary", count: 2 }] } });
    expect(explicit.status, JSON.stringify(explicit.json)).toBe(201);
    expect(explicit.json.strategy_source).toBe("request");
    expect(explicit.json.steps[0].title).toBe("canary 2");

    const plain = await start(await withDefault(), { strategy: null });
    expect(plain.status, JSON.stringify(plain.json)).toBe(201);
    expect(plain.json).toMatchObject({ strategy_source: "none", strategy: null, steps: [] });
  });

  it("a default the fleet's servers cannot follow is refused at the start, saying it is the fleet's", async () => {
    const { fleet } = await fleetWithAgent(2);
    const byZone = { strategy: { steps: [{ type: "wave", percent: 100, by: "zone" }] } };
    // Applied before any server has the label: the spec may well come before the hosts.
    expect((await apply(fleet, specWith(fleet, byZone))).status).toBe(200);
    const refused = await start(fleet);
    expect(refused.status).toBe(422);
    expect(refused.json.error.code).toBe("invalid_strategy");
    expect(refused.json.error.message).toContain(`the fleet's default strategy for '${AGENT}'`);
    expect(refused.json.error.message).toContain("the label key 'zone'");
    expect((await call("GET", `/v1/rollouts?fleet=${fleet}`)).json.items).toEqual([]);
  });

  it("is listed on the console's rollouts page, and a rollout's page says it follows it", async () => {
    const { fleet } = await fleetWithAgent(2);
    expect((await apply(fleet, specWith(fleet, { strategy: CANARY_THEN_ALL }))).status).toBe(200);
    const r = await start(fleet);
    expect(r.status).toBe(201);
    const { cookie } = await signIn();
    const list = await (await consoleFetch(`/console/rollouts?fleet=${fleet}`, { cookie })).text();
    expect(list).toContain('id="rollout-defaults"');
    expect(list).toMatch(new RegExp(`<td>${AGENT}</td><td>canary 1 → wave 100 %</td><td>yes</td>`));
    const page = await (await consoleFetch(`/console/rollouts/${r.json.id}?fleet=${fleet}`, { cookie })).text();
    // The page escapes the apostrophes.
    expect(page.replaceAll("&#39;", "'")).toContain(
      `the fleet's default for ${AGENT} (its spec's channels.${AGENT}.rollout)`,
    );
  });
});
