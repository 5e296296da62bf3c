import { groupConfig } from "../src/specs/groups";
import { createScheduledController, env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { runScheduled } from "../src/scheduled";
import { applyFleetSpec } from "../src/specs/service";
import { call } from "./helpers";
import { registerClients, zincati } from "./fleetlock-helpers";
import { apply, clone, diff, fleetWithIntent, getSpec, WINDOW } from "./specs-helpers";

describe("a spec with problems", () => {
  it("is refused with every problem and its path in the document; nothing is applied", async () => {
    const { fleet } = await fleetWithIntent();
    const { spec, etag } = await getSpec(fleet);
    const bad = clone(spec);
    bad.fleet = "someone-else";
    bad.reboot_groups.default.slots = 0;
    bad.reboot_groups.night.windows = [
      { ...WINDOW, days: [] },
      { ...WINDOW, time_zone: "Mars/Olympus_Mons" },
      { ...WINDOW, start_time: "25:00" },
      { ...WINDOW, length_minutes: 0 },
    ];
    bad.roles.edge.agents.push({ name: "ghost" });
    bad.channels.base.image = "";
    bad.extra = true;
    for (const send of [() => diff(fleet, bad), () => apply(fleet, bad), () => apply(fleet, bad, { prune: true })]) {
      const res = await send();
      expect(res.status).toBe(422);
      expect(res.json.error.code).toBe("invalid_spec");
      const paths = res.json.error.details.problems.map((p: any) => p.path);
      expect(paths).toEqual(
        expect.arrayContaining([
          "fleet",
          "reboot_groups.default.slots",
          "reboot_groups.night.windows.0.days",
          "reboot_groups.night.windows.1.time_zone",
          "reboot_groups.night.windows.2.start_time",
          "reboot_groups.night.windows.3.length_minutes",
          "roles.edge.agents.2.name",
          "channels.base.image",
          "(document)",
        ]),
      );
      for (const p of res.json.error.details.problems) expect(p.message).toEqual(expect.any(String));
    }
    expect((await getSpec(fleet)).etag).toBe(etag);
  });

  it("names a role's agent that has no channel in the spec or the fleet (with prune: in the spec)", async () => {
    const { fleet } = await fleetWithIntent();
    const { spec, etag } = await getSpec(fleet);
    const next = clone(spec);
    next.roles.edge.agents.push({ name: "ghost" });
    const res = await apply(fleet, next);
    expect(res.status).toBe(422);
    expect(res.json.error.details.problems).toEqual([
      { path: "roles.edge.agents.2.name", message: "agent 'ghost' has no channel in the spec or the fleet" },
    ]);

    // Without prune the fleet's channel counts; pruning would remove it, so then it does not.
    const lean = clone(spec);
    delete lean.channels.fw;
    expect((await diff(fleet, lean)).status).toBe(200);
    const pruned = await diff(fleet, lean, true);
    expect(pruned.status).toBe(422);
    expect(pruned.json.error.details.problems).toEqual([
      { path: "roles.edge.agents.1.name", message: "agent 'fw' has no channel in the spec" },
    ]);
    expect(
      (await call("PUT", `/v1/fleets/${fleet}/spec`, { body: { ...spec, apiVersion: "harbormaster/v0" } })).json.error
        .details.problems[0].path,
    ).toBe("apiVersion");
    expect((await getSpec(fleet)).etag).toBe(etag);
  });
});

/** The worker's env with a coordinator whose applyGroupSpec cannot be reached. */
function envWithoutGroupPushes() {
  return {
    ...env,
    REBOOT: new Proxy(env.REBOOT, {
      get(target, prop) {
        if (prop !== "get") return Reflect.get(target, prop);
        return (id: DurableObjectId) => {
          const stub = target.get(id);
          return new Proxy(stub, {
            get(s, p) {
              if (p === "applyGroupSpec") return () => Promise.reject(new Error("simulated: coordinator unreachable"));
              return Reflect.get(s, p);
            },
          });
        };
      },
    }),
  } as typeof env;
}

describe("reboot groups, owned by the coordinator", () => {
  it("converge through the fleet task when the coordinator cannot be reached after D1 committed", async () => {
    const { fleet } = await fleetWithIntent();
    const { spec } = await getSpec(fleet);
    const next = clone(spec);
    next.reboot_groups.default.slots = 6;
    // Written out in full (a field left out reads back as a new group's), so the spec reads back as sent.
    next.reboot_groups.day = groupConfig({ slots: 3, windows: [WINDOW] as never, queue_wait_s: 30 });
    const out = await applyFleetSpec(
      envWithoutGroupPushes(),
      { waitUntil() {} },
      "test",
      fleet,
      { spec: next, secrets: {} },
      { prune: false },
    );
    expect(out).toMatchObject({ changed: true, coordinator: { pending: true } });
    // The coordinator still has the old groups; the spec reads as applied already.
    expect((await call("GET", `/v1/fleets/${fleet}/reboot-groups/default`)).json.slots).toBe(2);
    expect((await call("GET", `/v1/fleets/${fleet}/reboot-groups/day`)).status).toBe(404);
    const seen = await getSpec(fleet);
    expect(seen.spec).toEqual(next);
    expect(seen.etag).toBe(out.etag);
    // The cron delivers it.
    await runScheduled(createScheduledController({ scheduledTime: Date.now() }), env);
    expect((await call("GET", `/v1/fleets/${fleet}/reboot-groups/default`)).json.slots).toBe(6);
    expect((await call("GET", `/v1/fleets/${fleet}/reboot-groups/day`)).json).toMatchObject({
      slots: 3,
      windows: [WINDOW],
      queue_wait_s: 30,
    });
    expect(
      await env.DB.prepare("SELECT COUNT(*) AS n FROM fleet_tasks WHERE fleet_id = ?").bind(fleet).first("n"),
    ).toBe(0);
    expect((await getSpec(fleet)).etag).toBe(out.etag);
  });

  it("a newer apply while an older one's groups are still owed keeps both; a late older push changes nothing", async () => {
    const { fleet } = await fleetWithIntent();
    const broken = envWithoutGroupPushes();
    const first = clone((await getSpec(fleet)).spec);
    first.reboot_groups.day = { slots: 3 };
    await applyFleetSpec(broken, { waitUntil() {} }, "test", fleet, { spec: first, secrets: {} }, { prune: false });
    const second = clone(first);
    delete second.reboot_groups.day;
    second.reboot_groups.default.slots = 4;
    await applyFleetSpec(broken, { waitUntil() {} }, "test", fleet, { spec: second, secrets: {} }, { prune: false });
    await runScheduled(createScheduledController({ scheduledTime: Date.now() }), env);
    const groups = (await getSpec(fleet)).spec.reboot_groups;
    expect(groups.day.slots).toBe(3);
    expect(groups.default.slots).toBe(4);

    const stub = env.REBOOT.get(env.REBOOT.idFromName(fleet));
    const settings = { fleet_id: fleet, lock_ttl_s: 3600, allow_unknown_ids: false, default_group_slots: null };
    const late = await stub.applyGroupSpec(settings, {
      rev: 1,
      groups: { default: { slots: 1, windows: [], queue_wait_s: 0 } },
      remove: ["day"],
    });
    expect(late.applied).toBe(false);
    expect((await getSpec(fleet)).spec.reboot_groups).toEqual(groups);
  });

  it("a pruned group that still has a holder is closed (0 slots), not removed, and says so", async () => {
    const { fleet } = await fleetWithIntent();
    const key = (await call("POST", `/v1/fleets/${fleet}/fleetlock-key`)).json.base_url as string;
    const [host] = await registerClients(fleet, 1, "night");
    await call("PUT", `/v1/fleets/${fleet}/reboot-groups/night`, { body: { slots: 1, windows: [] } });
    expect((await zincati(key, "pre-reboot", host.id, "night")).status).toBe(200);
    const lean = clone((await getSpec(fleet)).spec);
    delete lean.reboot_groups.night;
    const d = await diff(fleet, lean, true);
    expect(d.json.items).toEqual([
      expect.objectContaining({
        op: "remove",
        path: "reboot_groups.night",
        note: expect.stringMatching(/1 holder\(s\).*closed \(0 slots\)/),
      }),
    ]);
    expect((await apply(fleet, lean, { prune: true })).status).toBe(200);
    const night = (await call("GET", `/v1/fleets/${fleet}/reboot-groups/night`)).json;
    expect(night).toMatchObject({ slots: 0, holders: [expect.objectContaining({ id: host.id })] });
    // Once its holder is back, a later apply removes it.
    expect((await zincati(key, "steady-state", host.id, "night")).status).toBe(200);
    expect((await apply(fleet, lean, { prune: true })).json.items.map((i: any) => `${i.op} ${i.path}`)).toEqual([
      "remove reboot_groups.night",
    ]);
    expect((await call("GET", `/v1/fleets/${fleet}/reboot-groups/night`)).status).toBe(404);
  });
});
