import { runInDurableObject } from "cloudflare:test";
import { BASE, call, createFleet, registerServer, send } from "./helpers";
import { coordinator, sleep } from "./support/objects";

export interface FleetLockFleet {
  fleet: string;
  key: string;
  /** As POST /v1/fleets/{fleet}/fleetlock-key returns it: https://HOST/fleetlock/{fleet}/{key}/ */
  baseUrl: string;
}

export async function fleetWithKey(overrides: Record<string, unknown> = {}): Promise<FleetLockFleet> {
  const { id } = await createFleet(overrides);
  const res = await call("POST", `/v1/fleets/${id}/fleetlock-key`);
  if (res.status !== 201) throw new Error(`key: ${res.status} ${JSON.stringify(res.json)}`);
  return { fleet: id, key: res.json.key, baseUrl: res.json.base_url };
}

export async function putGroup(fleet: string, group: string, body: Record<string, unknown>) {
  const res = await call("PUT", `/v1/fleets/${fleet}/reboot-groups/${group}`, { body });
  if (res.status !== 200) throw new Error(`group: ${res.status} ${JSON.stringify(res.json)}`);
  return res.json;
}

export async function getGroup(fleet: string, group: string) {
  const res = await call("GET", `/v1/fleets/${fleet}/reboot-groups/${group}`);
  if (res.status !== 200) throw new Error(`group: ${res.status} ${JSON.stringify(res.json)}`);
  return res.json as {
    slots: number;
    paused: boolean;
    open_now: boolean;
    available_slots: number;
    holders: {
      id: string;
      granted_at: string;
      stuck: boolean;
      server: { id: string; hostname: string | null } | null;
    }[];
  };
}

/** Registers `n` servers whose FleetLock ids are returned in order. */
export async function registerClients(fleet: string, n: number, group = "default") {
  const out: { id: string; serverId: string; token: string; hostname: string }[] = [];
  for (let i = 0; i < n; i++) {
    const hostname = `node-${i}-${Math.random().toString(36).slice(2, 8)}.example.com`;
    const id = `node-${i}-${crypto.randomUUID().replaceAll("-", "")}`;
    const s = await registerServer(fleet, { hostname, fleetlock_id: id, reboot_group: group });
    out.push({ id, serverId: s.id, token: s.token, hostname });
  }
  return out;
}

export type Op = "pre-reboot" | "steady-state";

/**
 * Exactly as Zincati sends it: the URL resolved against base_url (trailing slash), the header,
 * a pretty-printed body and no Content-Type at all (a byte body gets none from fetch).
 */
export function zincati(baseUrl: string, op: Op, id: string, group = "default") {
  const url = new URL(`v1/${op}`, baseUrl).toString();
  const body = JSON.stringify({ client_params: { id, group } }, null, 2);
  return send(url, {
    method: "POST",
    headers: { "fleet-lock-protocol": "true" },
    body: new TextEncoder().encode(body),
  });
}

/** As `curl -H "fleet-lock-protocol: true" -d '{…}' URL` sends it: form Content-Type, compact body. */
export function curl(baseUrl: string, op: Op, id: string, group = "default") {
  return send(new URL(`v1/${op}`, baseUrl).toString(), {
    method: "POST",
    headers: { "fleet-lock-protocol": "true", "Content-Type": "application/x-www-form-urlencoded" },
    body: JSON.stringify({ client_params: { id, group } }),
  });
}

/** Anything else: a raw request against a path under the test origin. */
export function raw(path: string, init: RequestInit) {
  return send(path.startsWith("http") ? path : `${BASE}${path}`, init);
}

// ---- the queue, as operators and parked hosts see it ----

export type Queued = {
  position: number;
  id: string;
  connected: boolean;
  waiting_since: string;
  server: { id: string } | null;
};
export type Group = Omit<Awaited<ReturnType<typeof getGroup>>, "holders"> & {
  queue: Queued[];
  queue_wait_s: number;
  holders: {
    id: string;
    granted_at: string;
    unclaimed_until: string | null;
    server: { id: string; hostname: string | null } | null;
  }[];
  [more: string]: unknown;
};
export const view = async (fleet: string, group = "default") => (await getGroup(fleet, group)) as unknown as Group;

/** Polls the operator view until `check` holds (or fails after `ms`). */
export async function until(fleet: string, check: (g: Group) => boolean, ms = 5000, group = "default") {
  const end = Date.now() + ms;
  for (;;) {
    const g = await view(fleet, group);
    if (check(g)) return g;
    if (Date.now() > end) throw new Error(`condition not met: ${JSON.stringify(g)}`);
    await sleep(20);
  }
}

/** A pre-reboot that is expected to park: resolves with the response, and records when it settled. */
export function park(baseUrl: string, id: string, log: string[] = [], group = "default") {
  return zincati(baseUrl, "pre-reboot", id, group).then((r) => {
    log.push(id);
    return r;
  });
}

export async function parkInOrder(
  f: { fleet: string; baseUrl: string },
  ids: string[],
  log: string[] = [],
  group = "default",
) {
  const pending: ReturnType<typeof park>[] = [];
  for (const id of ids) {
    pending.push(park(f.baseUrl, id, log, group));
    // Wait until it is queued, so arrival order is the order given.
    await until(f.fleet, (g) => g.queue.some((q) => q.id === id), 5000, group);
  }
  return pending;
}

/**
 * Resets the coordinator the hard way, as a deploy or an eviction with requests in flight does:
 * every open call into it fails. (evictDurableObject waits for open calls to finish first.)
 */
export const resetCoordinator = (fleet: string) =>
  runInDurableObject(coordinator(fleet), (_i, state) => state.abort("reset by test")).catch(() => undefined);

/** The queue entries in the coordinator's storage (the view hides expired ones). */
export const storedQueue = (fleet: string) =>
  runInDurableObject(coordinator(fleet), (_i, state) =>
    [...state.storage.kv.list({ prefix: "queue:" })].map(([k]) => k),
  );

/** Moves the coordinator's clock by `offsetMs` (a new instance after eviction starts on real time). */
export const setClockOffset = (fleet: string, offsetMs: number) =>
  runInDurableObject(coordinator(fleet), (instance) => {
    (instance as unknown as { parts: { clock: () => number } }).parts.clock = () => Date.now() + offsetMs;
  });

/** Delivers what the coordinator's outbox holds now (host audit rows wait up to a second for a batch). */
export const flushCoordinator = (fleet: string) =>
  runInDurableObject(coordinator(fleet), async (instance) => {
    const { outbox } = (instance as unknown as { parts: { outbox: { flush(): Promise<void>; idle(): Promise<void> } } })
      .parts;
    await outbox.flush();
    await outbox.idle();
  });
