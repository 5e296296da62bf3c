import { env, runInDurableObject } from "cloudflare:test";
import type { Rollout } from "../src/rollouts/durable-object";
import { call, createFleet, registerServer, settle } from "./helpers";

export const AGENT = "fw-agent";
export const OLD = "registry.example/fw:1.0.0";
export const NEW = "registry.example/fw:2.0.0";

// Typed as a plain stub: the RPC type of the whole class is too deep for runInDurableObject.
export const rolloutStub = (id: string): DurableObjectStub & Pick<Rollout, "targetEvent"> =>
  env.ROLLOUT.get(env.ROLLOUT.idFromName(id)) as unknown as DurableObjectStub & Pick<Rollout, "targetEvent">;

export interface Host {
  id: string;
  token: string;
  hostname: string;
}

/** A fleet whose `n` servers run AGENT at OLD (desired generation 2, reported realized). */
export async function fleetWithAgent(
  n: number,
  opts: { fleet?: Record<string, unknown>; server?: (i: number) => Record<string, unknown> } = {},
) {
  const { id: fleet } = await createFleet(opts.fleet ?? {});
  const hosts: Host[] = [];
  for (let i = 0; i < n; i++) {
    const hostname = `node-${i}-${Math.random().toString(36).slice(2, 7)}.example.com`;
    const s = await registerServer(fleet, { hostname, ...opts.server?.(i) });
    const put = await call("PUT", `/v1/servers/${s.id}/desired`, {
      body: {
        generation: 2,
        agents: [
          { name: AGENT, image: OLD, version: "1.0.0" },
          { name: "logs", image: "registry.example/logs:1", version: "1" },
        ],
      },
    });
    if (put.status !== 201 && put.status !== 200) throw new Error(`desired: ${put.status} ${JSON.stringify(put.json)}`);
    hosts.push({ id: s.id, token: s.token, hostname });
    await hostReconcile(hosts[i]);
  }
  return { fleet, hosts };
}

/**
 * One round of a host that reconciles instantly: fetch the desired config, report it realized
 * (or with an install error for AGENT when `fail`).
 */
export async function hostReconcile(h: Host, opts: { fail?: boolean; bootId?: string } = {}) {
  const d = await call("GET", "/v1/agent/desired", { token: h.token });
  const cfg = d.json as {
    generation: number;
    agents: { name: string; image: string; version: string; instance_id: string }[];
  };
  const agents = cfg.agents
    .filter((a) => !(opts.fail && a.name === AGENT))
    .map((a) => ({ name: a.name, image: a.image, version: a.version, instance_id: a.instance_id, state: "running" }));
  const res = await call("PUT", "/v1/agent/inventory", {
    token: h.token,
    body: {
      generation: cfg.generation,
      reconciled_at: new Date().toISOString(),
      boot_id: opts.bootId ?? "boot-1",
      agents,
      errors: opts.fail ? [{ agent: AGENT, op: "update", message: "image pull failed" }] : [],
      assignments: { units: [], storage: [] },
    },
  });
  if (res.status !== 200) throw new Error(`report: ${res.status} ${JSON.stringify(res.json)}`);
  return cfg.generation;
}

/** Lets the rollout's outbox deliver whatever is due (ledger writes, slot requests, D1 rows). */
export async function drain(id: string) {
  for (let i = 0; i < 20; i++) {
    const pending = await runInDurableObject(rolloutStub(id), async (instance: any, state) => {
      await instance.parts.outbox.flush();
      return state.storage.sql
        .exec<{ n: number }>("SELECT COUNT(*) AS n FROM _outbox WHERE attempts = 0 AND kind != 'feed'")
        .one().n;
    });
    if (pending === 0) return;
  }
}

export async function startRollout(body: Record<string, unknown>) {
  const res = await call("POST", "/v1/rollouts", { body: { agent: AGENT, image: NEW, version: "2.0.0", ...body } });
  if (res.status !== 201) throw new Error(`rollout: ${res.status} ${JSON.stringify(res.json)}`);
  await drain(res.json.id);
  return res.json as { id: string; state: string; counts: Record<string, number> };
}

export async function getRollout(id: string) {
  await drain(id);
  const res = await call("GET", `/v1/rollouts/${id}`);
  if (res.status !== 200) throw new Error(`get: ${res.status} ${JSON.stringify(res.json)}`);
  return res.json as {
    id: string;
    state: string;
    reason: string | null;
    counts: Record<string, number>;
    warnings: { server_id: string; message: string }[];
    eta_s: number | null;
    median_s: number | null;
    channel_updated: boolean | null;
    created_by_name: string | null;
    change: number;
  };
}

export async function targets(id: string, query = "") {
  const res = await call("GET", `/v1/rollouts/${id}/targets${query}`);
  if (res.status !== 200) throw new Error(`targets: ${res.status} ${JSON.stringify(res.json)}`);
  return res.json.items as {
    server_id: string;
    hostname: string;
    state: string;
    generation: number | null;
    reason: string | null;
    from_image: string | null;
    image: string;
    reboot_slot: string;
  }[];
}

/** Every host whose desired config has a newer generation than it reported reconciles once. */
export async function reconcileApplying(id: string, hosts: Host[], opts: { fail?: (h: Host) => boolean } = {}) {
  const applying = new Set((await targets(id, "?state=applying")).map((t) => t.server_id));
  for (const h of hosts.filter((x) => applying.has(x.id))) {
    await hostReconcile(h, { fail: opts.fail?.(h) });
    await settle(h.id);
  }
  await drain(id);
  return applying.size;
}

/** The rollout's one deadline timer (src/rollouts/deadlines.ts): when it is due, or null when unset. */
export const deadlineTimer = (id: string) =>
  runInDurableObject(rolloutStub(id), (_i, state) => {
    const has = state.storage.sql.exec("SELECT 1 FROM sqlite_master WHERE name = '_timers'").toArray().length > 0;
    if (!has) return null;
    const rows = state.storage.sql
      .exec<{ name: string; due_at: number }>("SELECT name, due_at FROM _timers WHERE name = 'deadlines'")
      .toArray();
    return rows[0]?.due_at ?? null;
  });

/**
 * As if `ms` had passed for the targets in flight: their start, and the cancels they are waited
 * on from, moved that far into the past (the rollout's clock is the runtime's, which a test cannot move).
 */
export const agePastDeadlines = (id: string, ms: number) =>
  runInDurableObject(rolloutStub(id), (_i, state) => {
    state.storage.sql.exec("UPDATE targets SET started_at = started_at - ? WHERE state = 'applying'", ms);
    const cancels = state.storage.kv.get<number[]>("cancels");
    if (cancels)
      state.storage.kv.put(
        "cancels",
        cancels.map((at) => at - ms),
      );
    const core = state.storage.kv.get<{ ended_at: number | null }>("core")!;
    if (core.ended_at !== null) state.storage.kv.put("core", { ...core, ended_at: core.ended_at - ms });
  });

/**
 * The rollout object `id` (made now if new) with its ledger writes held at a gate until `release`:
 * they are sent (`sent` counts them) but land only when the test says. Every other call, and the
 * rest of the env, is the real one.
 */
export async function holdLedgerWrites(id: string) {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const calls = { sent: 0, landed: 0 };
  const bound = (target: object, prop: PropertyKey) => {
    const v = Reflect.get(target, prop);
    return typeof v === "function" ? v.bind(target) : v;
  };
  const held = new Proxy(env.LEDGER, {
    get(target, prop) {
      if (prop !== "get") return bound(target, prop);
      return (lid: DurableObjectId) => {
        const stub = target.get(lid);
        return new Proxy(stub, {
          get(s, p) {
            if (p !== "applyRolloutImage") return bound(s, p);
            return async (...args: Parameters<typeof stub.applyRolloutImage>) => {
              calls.sent++;
              await gate;
              calls.landed++;
              return stub.applyRolloutImage(...args);
            };
          },
        });
      };
    },
  });
  await runInDurableObject(rolloutStub(id), (instance) => {
    const o = instance as unknown as { env: object };
    o.env = { ...o.env, LEDGER: held };
  });
  return { calls, release: () => release() };
}
