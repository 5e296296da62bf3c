// FleetLock host traffic: pre-reboot + steady-state pairs, each connection playing one host with
// its own registered id, shaped as Zincati sends them (no Content-Type, pretty-printed body).
// Once on a group with a slot for everyone (no refusals), once on a contended group of 2 slots
// (most pre-reboots answer 409 semaphore_full, which is the work being measured).
import type { Options } from "autocannon";
import type { BenchContext } from "../run.ts";

const CLIENTS = 16;
type Group = "wide" | "narrow";

export async function run(ctx: BenchContext) {
  const fleet = `flbench-${Date.now().toString(36)}`;
  const f = await ctx.client.v1.fleets.$post({ json: { id: fleet } });
  if (f.status !== 201) throw new Error(`fleet: ${f.status} ${await f.text()}`);
  const k = await ctx.client.v1.fleets[":fleet"]["fleetlock-key"].$post({ param: { fleet } });
  if (k.status !== 201) throw new Error(`key: ${k.status} ${await k.text()}`);
  // base_url carries the request's origin; the load goes to the same path on the bench server.
  const basePath = new URL((await k.json()).base_url).pathname;

  for (const [group, slots] of [
    ["wide", CLIENTS],
    ["narrow", 2],
  ] as const) {
    const g = await ctx.client.v1.fleets[":fleet"]["reboot-groups"][":group"].$put({
      param: { fleet, group },
      json: { slots },
    });
    if (g.status !== 200) throw new Error(`group: ${g.status} ${await g.text()}`);
  }
  const ids: Record<Group, string[]> = { wide: [], narrow: [] };
  for (const group of ["wide", "narrow"] as const) {
    for (let i = 0; i < CLIENTS; i++) {
      const id = `${group}-${i}-${Math.random().toString(16).slice(2, 10)}`;
      const s = await ctx.client.v1.servers.$post({
        json: { fleet, hostname: `${group}-${i}.bench`, kind: "managed", reboot_group: group, fleetlock_id: id },
      });
      if (s.status !== 201) throw new Error(`server: ${s.status} ${await s.text()}`);
      ids[group].push(id);
    }
  }

  // Warm-up outside the measurements: the first requests compile the FleetLock path and wake the
  // coordinator, which would otherwise land in the first figure.
  for (let i = 0; i < 200; i++) {
    const id = ids.wide[i % CLIENTS];
    for (const op of ["pre-reboot", "steady-state"]) {
      await fetch(`${ctx.base}${basePath}v1/${op}`, {
        method: "POST",
        headers: { "fleet-lock-protocol": "true" },
        body: JSON.stringify({ client_params: { id, group: "wide" } }),
      });
    }
  }

  const pairs = (group: Group): Options["requests"] => {
    let next = 0;
    // One id per connection, fixed for its life: each connection is one host.
    const bodyFor = (context: { body?: string }) => {
      context.body ??= JSON.stringify({ client_params: { id: ids[group][next++ % CLIENTS], group } }, null, 2);
      return context.body;
    };
    const headers = { "fleet-lock-protocol": "true" };
    return ["pre-reboot", "steady-state"].map((op) => ({
      method: "POST",
      path: `${basePath}v1/${op}`,
      setupRequest: (req: object, context: { body?: string }) => ({ ...req, headers, body: bodyFor(context) }),
    }));
  };

  for (const [group, label] of [
    ["wide", `FleetLock pre-reboot + steady-state, ${CLIENTS} hosts, slots ${CLIENTS}`],
    ["narrow", `FleetLock pre-reboot + steady-state, ${CLIENTS} hosts, slots 2 (contended)`],
  ] as [Group, string][]) {
    const row = await ctx.measure(label, { connections: CLIENTS, requests: pairs(group) });
    ctx.note(`${label}: pairs/s`, (row.rps / 2).toFixed(0));
    if (group === "wide") ctx.goal(`FleetLock pair at ${CLIENTS} slots, × ceiling`, row.ratio, ">=", 0.6);
    // Every pair ends in a release, so nothing may be left held.
    const res = await ctx.client.v1.fleets[":fleet"]["reboot-groups"][":group"].$get({ param: { fleet, group } });
    if (res.status !== 200) throw new Error(`status: ${res.status}`);
    const after = await res.json();
    if (after.holders.length > after.slots) throw new Error(`${group}: holders exceed slots`);
    ctx.note(`${label}: holders left after load (in-flight pairs cut at the end)`, after.holders.length);
  }
}
