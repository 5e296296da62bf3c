// What the crash checks share: one local server (wrangler dev, workerd included) that is killed
// with kill -9 and started again on the same state, and a small JSON client for it.
import { rmSync } from "node:fs";
import { startLocalServer, type LocalServer } from "../local-server.ts";

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let server: LocalServer | null = null;
let admin = "";

/** The server's base URL now (every restart listens on another port). */
let base = "";

/** The first start makes the state; every restart runs on it (a new port each time). */
export async function start() {
  // startLocalServer picks another port itself when the one it picked was taken meanwhile.
  server = await startLocalServer({ label: "crash", reuse: server ? { persist: server.persist, admin } : undefined });
  base = server.url;
  admin = server.admin;
}

/** kill -9 of the whole process group: wrangler and workerd die between whatever statements they were at. */
export function crash() {
  server?.crash();
}

/** Kills the server and removes its state. */
function cleanUp() {
  crash();
  if (server) rmSync(server.persist, { recursive: true, force: true });
}

export async function api(method: string, path: string, body?: unknown, token = admin) {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return answerOf(res);
}

/** An answer's status and body: its JSON, or its text when it is not JSON, or null when empty. */
export async function answerOf(res: Response): Promise<{ status: number; json: any }> {
  const text = await res.text();
  let json: any = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = text;
  }
  return { status: res.status, json };
}

/** A FleetLock call (`basePath`: the key's path, which outlives restarts). */
export function fleetlock(basePath: string, op: "pre-reboot" | "steady-state", id: string) {
  return fetch(new URL("v1/" + op, `${base}${basePath}`), {
    method: "POST",
    headers: { "fleet-lock-protocol": "true" },
    body: JSON.stringify({ client_params: { id, group: "default" } }),
  });
}

/** Runs a scenario; whatever happens, the server dies and its state goes. */
export function run(main: () => Promise<void>) {
  main()
    .catch((err) => {
      console.error(err?.stack ?? err);
      process.exitCode = 1;
    })
    .finally(cleanUp);
}

/**
 * A fleet for a crash check: created, with a FleetLock key (its path only: every restart listens
 * on another port), a `default` reboot group of 100 slots, and `n` servers registered with the
 * names `nameOf` gives (each registration answered 201).
 */
export async function setUpFleet(
  prefix: string,
  n: number,
  nameOf: (i: number) => { hostname: string; fleetlock_id: string },
) {
  const fleet = `${prefix}-${Date.now().toString(36)}`;
  if ((await api("POST", "/v1/fleets", { id: fleet })).status !== 201) throw new Error("fleet");
  const key = new URL((await api("POST", `/v1/fleets/${fleet}/fleetlock-key`)).json.base_url).pathname;
  await api("PUT", `/v1/fleets/${fleet}/reboot-groups/default`, { slots: 100 });
  const servers: { id: string; token: string }[] = [];
  for (let i = 0; i < n; i++) {
    const r = await api("POST", "/v1/servers", { fleet, kind: "managed", ...nameOf(i) });
    if (r.status !== 201) throw new Error(`register: ${r.status}`);
    servers.push({ id: r.json.id, token: r.json.token });
  }
  return { fleet, key, servers };
}
