import { env, runInDurableObject, SELF } from "cloudflare:test";

export const ADMIN = "test-admin-token";
export const BASE = "https://hm.test";

export interface CallOptions {
  token?: string | null;
  body?: unknown;
  rawBody?: string;
  headers?: Record<string, string>;
}

export async function call(method: string, path: string, opts: CallOptions = {}) {
  const headers: Record<string, string> = { ...opts.headers };
  const token = opts.token === undefined ? ADMIN : opts.token;
  if (token) headers.Authorization = `Bearer ${token}`;
  let body: string | undefined;
  if (opts.rawBody !== undefined) body = opts.rawBody;
  else if (opts.body !== undefined) {
    body = JSON.stringify(opts.body);
    headers["Content-Type"] ??= "application/json";
  }
  const res = await send(`${BASE}${path}`, { method, headers, body });
  // Reports are acknowledged before their D1 projection lands; tests that read the index after a
  // report wait for that server's ledger to finish projecting.
  const host = token && /^hms\.([0-9a-f-]{36})\./.exec(token);
  if (host && path === "/v1/agent/inventory") await settle(host[1]);
  return res;
}

/** Any request through the worker; the body is parsed as JSON when it is JSON, else kept as text. */
export async function send(url: string, init: RequestInit) {
  const res = await SELF.fetch(url, init);
  const text = await res.text();
  let json: any = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = text;
  }
  return { status: res.status, headers: res.headers, json };
}

/** Makes the ledger's D1 refuse every statement (an outage) until the returned restore runs. */
export async function breakLedgerD1(stub: DurableObjectStub) {
  const realDb = env.DB;
  const failing = new Proxy(realDb, {
    get(target, prop) {
      if (prop === "batch" || prop === "prepare") {
        return () => {
          throw new Error("D1_ERROR: simulated outage");
        };
      }
      return Reflect.get(target, prop);
    },
  });
  const swap = (db: D1Database) =>
    runInDurableObject(stub, (instance) => {
      (instance as any).env = { ...(instance as any).env, DB: db };
    });
  await swap(failing);
  return () => swap(realDb);
}

let counter = 0;
export const uniq = (prefix: string) => `${prefix}-${Date.now().toString(36)}-${(counter++).toString(36)}`;

export async function createFleet(overrides: Record<string, unknown> = {}) {
  const id = uniq("f");
  const res = await call("POST", "/v1/fleets", { body: { id, ...overrides } });
  if (res.status !== 201) throw new Error(`fleet: ${res.status} ${JSON.stringify(res.json)}`);
  return res.json as { id: string };
}

export async function registerServer(fleet: string, overrides: Record<string, unknown> = {}) {
  const res = await call("POST", "/v1/servers", {
    body: { fleet, hostname: `${uniq("h")}.example.com`, kind: "managed", ...overrides },
  });
  if (res.status !== 201) throw new Error(`server: ${res.status} ${JSON.stringify(res.json)}`);
  return res.json as { id: string; token: string; desired: { generation: number } };
}

export function report(generation: number, agents: { name: string; image: string; state?: string }[], extra: Record<string, unknown> = {}) {
  return {
    generation,
    reconciled_at: new Date().toISOString(),
    boot_id: "boot-1",
    agents: agents.map((a) => ({
      name: a.name,
      image: a.image,
      version: a.image.split(":")[1] ?? "1",
      instance_id: `i-${a.name}`,
      state: a.state ?? "running",
    })),
    errors: [],
    assignments: { units: [], storage: [] },
    ...extra,
  };
}

/** D1 statement counters from /metrics (the worker, ledgers and tests share one isolate here). */
export async function d1Statements() {
  const text = (await call("GET", "/metrics", { token: null })).json as string;
  const n = (kind: string) => Number(new RegExp(`harbormaster_d1_statements_total\\{kind="${kind}"\\} (\\d+)`).exec(text)![1]);
  return { reads: n("read"), writes: n("write") };
}

/** Waits until the ledger's queued D1 projections have run. */
export async function settle(serverId: string) {
  const stub = env.LEDGER.get(env.LEDGER.idFromName(serverId));
  await runInDurableObject(stub, async (instance) => {
    await (instance as unknown as { projecting: Promise<void> }).projecting;
  });
}
