import { env, runDurableObjectAlarm, runInDurableObject, SELF } from "cloudflare:test";
import { contractProblems } from "./contract";

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

/**
 * Any request through the worker; the body is parsed as JSON when it is JSON, else kept as text.
 * Every answer is checked against the OpenAPI document (test/contract.ts): one that the document
 * does not describe fails the test that received it.
 */
export async function send(url: string, init: RequestInit) {
  const res = await SELF.fetch(url, init);
  const text = await res.text();
  const violation = await contractProblems(init.method ?? "GET", url, res, text);
  if (violation)
    throw new Error(`answer outside the OpenAPI document: ${violation.where}\n  ${violation.problems.join("\n  ")}`);
  let json: any = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = text;
  }
  return { status: res.status, headers: res.headers, json };
}

/** A fetch through the worker whose every answer is checked against the OpenAPI document, as send's are. */
export async function checkedFetch(input: RequestInfo | URL, init?: RequestInit): Promise<Response> {
  const req = new Request(input, init);
  const res = await SELF.fetch(req.clone());
  const text = await res.clone().text();
  const violation = await contractProblems(req.method, req.url, res, text);
  if (violation)
    throw new Error(`answer outside the OpenAPI document: ${violation.where}\n  ${violation.problems.join("\n  ")}`);
  return res;
}

/** Replaces one binding in a Durable Object's env until the returned restore runs. */
async function swapBinding(stub: DurableObjectStub, name: "DB" | "REBOOT" | "LEDGER", replacement: unknown) {
  const real = (env as any)[name];
  const swap = (value: unknown) =>
    runInDurableObject(stub, (instance) => {
      (instance as any).env = { ...(instance as any).env, [name]: value };
    });
  await swap(replacement);
  return () => swap(real);
}

/** Makes the object's D1 refuse every statement (an outage) until the returned restore runs. */
export function breakD1(stub: DurableObjectStub) {
  return swapBinding(
    stub,
    "DB",
    new Proxy(env.DB, {
      get(target, prop) {
        if (prop === "batch" || prop === "prepare") {
          return () => {
            throw new Error("D1_ERROR: simulated outage");
          };
        }
        return Reflect.get(target, prop);
      },
    }),
  );
}

/**
 * Makes the object's D1 batches commit and then fail (a timeout after the commit: the caller cannot
 * tell a write that happened from one that did not) until the returned restore runs.
 */
export function timeOutD1AfterCommit(stub: DurableObjectStub) {
  return swapBinding(
    stub,
    "DB",
    new Proxy(env.DB, {
      get(target, prop) {
        if (prop === "batch") {
          return async (statements: D1PreparedStatement[]) => {
            await target.batch(statements);
            throw new Error("D1_ERROR: simulated timeout after commit");
          };
        }
        return Reflect.get(target, prop);
      },
    }),
  );
}

/** Makes every call from the object to the fleets' coordinators fail until restored. */
export function breakCoordinator(stub: DurableObjectStub) {
  const unreachable = new Proxy(
    {},
    {
      get() {
        return () => Promise.reject(new Error("simulated: coordinator unreachable"));
      },
    },
  );
  return swapBinding(
    stub,
    "REBOOT",
    new Proxy(env.REBOOT, {
      get(target, prop) {
        if (prop === "get") return () => unreachable;
        return Reflect.get(target, prop);
      },
    }),
  );
}

/**
 * Effects still waiting in an object's outbox; a console notice held back by the feed's rate limit
 * (src/notices/notices.ts) is not work owed and is not counted.
 */
export const pendingEffects = (stub: DurableObjectStub) =>
  runInDurableObject(stub, (_i, state) =>
    state.storage.sql.exec("SELECT 1 FROM sqlite_master WHERE name = '_outbox'").toArray().length
      ? state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM _outbox WHERE kind != 'feed'").one().n
      : 0,
  );

/**
 * Runs the object's alarm as if every timer (outbox backoff included), or those named `only…`,
 * were due now: what the runtime does on its own once the time comes.
 */
type Idle = { idle?: () => Promise<void> };

export async function fireTimersNow(stub: DurableObjectStub, only?: string) {
  await runInDurableObject(stub, async (_i, state) => {
    const past = Date.now() - 1;
    const has = (t: string) =>
      state.storage.sql.exec("SELECT 1 FROM sqlite_master WHERE name = ?", t).toArray().length > 0;
    // `only`: just the timers whose name starts with it (the others keep their time).
    if (has("_timers"))
      state.storage.sql.exec("UPDATE _timers SET due_at = ? WHERE name LIKE ?", past, `${only ?? ""}%`);
    if (has("_outbox")) state.storage.sql.exec("UPDATE _outbox SET next_at = ? WHERE attempts > 0", past);
    if (has("webhook_sends")) state.storage.sql.exec("UPDATE webhook_sends SET next_at = ? WHERE attempts > 0", past);
    if ((await state.storage.getAlarm()) === null) await state.storage.setAlarm(past);
  });
  const ran = await runDurableObjectAlarm(stub);
  // A coordinator's webhook sends and gate checks run unawaited by its alarm: let them finish before looking.
  await runInDurableObject(stub, async (instance) => {
    const parts = (instance as unknown as { parts?: { webhooks?: Idle; gates?: Idle } }).parts;
    await Promise.all([parts?.webhooks?.idle?.(), parts?.gates?.idle?.()]);
  });
  return ran;
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

export function report(
  generation: number,
  agents: { name: string; image: string; state?: string }[],
  extra: Record<string, unknown> = {},
) {
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

/**
 * D1 statement counters from /__local/d1-statements, which only the local entry serves: a test file
 * that reads them is listed in vitest.config.ts's METERED (the worker, ledgers and tests share one
 * isolate here).
 */
export async function d1Statements() {
  const res = await call("GET", "/__local/d1-statements", { token: null });
  if (res.status !== 200)
    throw new Error("no /__local/d1-statements: list this test file in vitest.config.ts's METERED");
  return res.json as { reads: number; writes: number };
}

/**
 * D1 rows read and written by what `fn` sends, and its round trips (every statement, or batch,
 * goes through the binding's internal send).
 */
export async function d1Rows(fn: () => Promise<unknown>) {
  type Answer = { meta?: { rows_read?: number; rows_written?: number } };
  const session = (
    env.DB as unknown as { alwaysPrimarySession: { _send: (...a: unknown[]) => Promise<Answer | Answer[]> } }
  ).alwaysPrimarySession;
  const send = session._send;
  const rows = { read: 0, written: 0, trips: 0 };
  session._send = function (this: unknown, ...args: unknown[]) {
    rows.trips++;
    const answer = send.apply(this, args);
    void answer.then((a) => {
      for (const one of Array.isArray(a) ? a : [a]) {
        rows.read += one?.meta?.rows_read ?? 0;
        rows.written += one?.meta?.rows_written ?? 0;
      }
    });
    return answer;
  };
  try {
    await fn();
  } finally {
    session._send = send;
  }
  return rows;
}

/**
 * A registered server whose ledger holds generation 2 of `agents` and a report of it, delivered:
 * the starting point of a test about the next report. `stub` is the server's ledger.
 */
export async function reportingServer(agents: { name: string; image: string }[]) {
  const fleet = await createFleet();
  const s = await registerServer(fleet.id);
  await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents } });
  const res = await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(2, agents) });
  if (res.status !== 200) throw new Error(`report: ${res.status} ${JSON.stringify(res.json)}`);
  await settle(s.id);
  return { s, stub: env.LEDGER.get(env.LEDGER.idFromName(s.id)) };
}

/** Waits until the ledger's outbox has delivered what a report enqueued (or tried to). */
export async function settle(serverId: string) {
  const stub = env.LEDGER.get(env.LEDGER.idFromName(serverId));
  await runInDurableObject(stub, async (instance) => {
    const { outbox } = (instance as unknown as { parts: { outbox: { flush(): Promise<void>; idle(): Promise<void> } } })
      .parts;
    await outbox.flush();
    // Calls an earlier flush left under way too: a receiver's lane may still hold them.
    await outbox.idle();
  });
}
