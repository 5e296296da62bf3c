/**
 * The local cost meter: what a deployment would be billed for, counted while the worker runs
 * locally from the local entry (./index.ts: `npm run bench`, the meter's own tests), never in a
 * deployment, whose entry (src/index.ts) exports the objects and the Worker unwrapped. Served at
 * /__local/meter.
 *
 * Counted per Durable Object instance, summed per class, and for the Worker:
 * - requests. An object: each RPC call, fetch and alarm is one; each WebSocket message it receives
 *   counts 1/20 (the billing ratio); webSocketClose/webSocketError run (and keep it awake) but are
 *   not billed as requests. The Worker: each fetch and each scheduled (cron) run.
 * - awake time: the wall-clock time an object is billed for (duration), defined below.
 * - D1 rows read and written, from each statement's meta, by the sender (./d1-taps.ts).
 * - an object's own storage rows read and written, each setAlarm() one of them, and its stored
 *   bytes (./storage-meter.ts); D1's stored bytes (./d1-taps.ts).
 * - Workers Logs: the lines the worker writes (console.*), by kind, and the invocations each of
 *   which writes an execution log where invocation logs are on (the Worker's fetches and cron
 *   runs, each object's calls, alarms and WebSocket events), for scripts/bench/bill.ts to price
 *   as wrangler.toml's [observability] deploys them. The Worker's requests are also counted as
 *   writes (not GET/HEAD, or answered 5xx): what ACCESS_LOG "writes" logs.
 * Objects are metered from the outside: `metered(Base, name)` returns a subclass whose instances
 * are seen by the runtime through a proxy, so only calls that come from outside the object (RPC,
 * fetch, alarm, webSocket* handlers) pass the meter; the object's calls to itself do not.
 *
 * Awake. Cloudflare bills an object's duration while it runs or is idle but cannot hibernate; an
 * idle object that could hibernate is not billed, even before it hibernates. It cannot hibernate
 * while a request or event is being handled, a setTimeout/setInterval is pending, or awaited I/O
 * is in progress (Durable Objects pricing and lifecycle pages: see scripts/bench/prices.ts). So
 * here an object is awake from the start of a call until it has
 *   - no call in flight (entered through the proxy, not yet settled), and
 *   - no work given to ctx.waitUntil still running (it holds I/O past the answer).
 * Timers: no object keeps a timer or a waiting call past its call (every wait is held in the
 * Worker on a hibernatable waiter socket, ./wake.ts; deadlines are storage alarms), so a
 * setTimeout in an object belongs to a call in flight and is counted above. Storage alarms and
 * hibernatable WebSockets do not keep an object awake (an alarm or a message wakes it: a
 * request). A bare setTimeout left behind by a call would be missed (the meter cannot see it).
 * The lifecycle page says the runtime hibernates an idle object after 10 s; the pricing page's
 * footnote on WebSockets says an object "will remain active for 10 seconds after the last client
 * disconnects". awake_ms leaves that tail out (the FAQ: not billed while it could hibernate);
 * idle_tail_ms counts it (up to 10 s after each awake period), so a bill can show both readings.
 */
import { meteredBucket, r2Ops, resetR2Ops } from "./r2-meter";
import { d1RowsInto, d1RowsMetered, d1Stored, d1Unattributed, type D1Rows } from "./d1-taps";
import { meterStorage, type StorageRows } from "./storage-meter";

/** The idle time before the runtime hibernates an object (lifecycle page), for idle_tail_ms. */
const IDLE_BEFORE_HIBERNATION_MS = 10_000;
/** Incoming WebSocket messages billed per request. */
const WS_MESSAGES_PER_REQUEST = 20;

type Kind = "rpc" | "fetch" | "alarm" | "ws_messages" | "ws_events";
const KINDS: Record<string, Kind> = {
  fetch: "fetch",
  alarm: "alarm",
  webSocketMessage: "ws_messages",
  webSocketClose: "ws_events",
  webSocketError: "ws_events",
};

const zeroRows = (): D1Rows => ({ statements: 0, rowsRead: 0, rowsWritten: 0 });
const zeroCounts = () => ({ rpc: 0, fetch: 0, alarm: 0, ws_messages: 0, ws_events: 0, starts: 0 });

/** One object instance's meter. */
class ObjectMeter {
  counts = zeroCounts();
  readonly d1 = zeroRows();
  readonly storage: StorageRows = { rowsRead: 0, rowsWritten: 0, alarmsSet: 0, storedBytes: 0, byStatement: new Map() };
  /** Folds the rows of the object's finished SQL cursors into `storage`. */
  settleStorage = () => {};
  methods = new Map<string, { calls: number; ms: number; max_ms: number }>();
  inFlight = 0;
  pending = 0;
  private awakeMs = 0;
  private tailMs = 0;
  private awakeSince: number | null = null;
  private idleSince: number | null = null;

  /** Call after every change of the two counts: opens or closes the awake period. */
  private update(now = Date.now()) {
    const busy = this.inFlight + this.pending > 0;
    if (busy && this.awakeSince === null) {
      if (this.idleSince !== null) this.tailMs += Math.min(now - this.idleSince, IDLE_BEFORE_HIBERNATION_MS);
      this.awakeSince = now;
      this.idleSince = null;
    } else if (!busy && this.awakeSince !== null) {
      this.awakeMs += now - this.awakeSince;
      this.awakeSince = null;
      this.idleSince = now;
    }
  }

  enter(kind: Kind) {
    this.counts[kind]++;
    this.inFlight++;
    this.update();
  }

  leave(method: string, started: number) {
    const now = Date.now();
    const m = this.methods.get(method) ?? { calls: 0, ms: 0, max_ms: 0 };
    m.calls++;
    m.ms += now - started;
    m.max_ms = Math.max(m.max_ms, now - started);
    this.methods.set(method, m);
    this.inFlight--;
    if (this.inFlight === 0) this.settleStorage();
    this.update(now);
  }

  waitUntil(work: Promise<unknown>) {
    this.pending++;
    this.update();
    const done = () => {
      this.pending--;
      this.update();
    };
    work.then(done, done);
  }

  reading(now: number) {
    this.settleStorage();
    const open = (since: number | null) => (since === null ? 0 : now - since);
    const c = this.counts;
    return {
      requests: c.rpc + c.fetch + c.alarm + c.ws_messages / WS_MESSAGES_PER_REQUEST,
      ...c,
      awake_ms: this.awakeMs + open(this.awakeSince),
      idle_tail_ms: this.tailMs + Math.min(open(this.idleSince), IDLE_BEFORE_HIBERNATION_MS),
      in_flight: this.inFlight,
      waiting_until: this.pending,
      d1: rowsReading(this.d1),
      storage: {
        rows_read: this.storage.rowsRead,
        rows_written: this.storage.rowsWritten,
        alarms_set: this.storage.alarmsSet,
        stored_bytes: this.storage.storedBytes,
      },
    };
  }

  /** A new measurement window: what is under way stays, from now on. */
  reset(now: number) {
    this.counts = zeroCounts();
    // Zeroed in place: the object's D1 handle keeps adding to the same counters.
    Object.assign(this.d1, zeroRows());
    this.settleStorage();
    Object.assign(this.storage, { rowsRead: 0, rowsWritten: 0, alarmsSet: 0 });
    this.storage.byStatement.clear();
    this.methods.clear();
    this.awakeMs = this.tailMs = 0;
    if (this.awakeSince !== null) this.awakeSince = now;
    if (this.idleSince !== null) this.idleSince = now - IDLE_BEFORE_HIBERNATION_MS < this.idleSince ? now : null;
  }
}

const rowsReading = (r: D1Rows) => ({ statements: r.statements, rows_read: r.rowsRead, rows_written: r.rowsWritten });

const objects = new Map<string, Map<string, ObjectMeter>>();
/**
 * The Worker's D1 rows: its fetches' (`d1`) and its cron runs' (`cronD1`) apart, because a
 * deployment runs the cron once a minute whatever its size: a bill scales the first with the
 * hosts and counts the second once per deployment.
 */
const worker = { requests: 0, writeRequests: 0, scheduled: 0, d1: zeroRows(), cronD1: zeroRows(), cronPending: 0 };
/** Lines written to the console by the worker and its objects (Workers Logs' custom logs), by kind. */
const logs = { lines: 0, access: 0, cron: 0 };

/**
 * Counts every console line from now on: `request` lines are the access log (src/http/log.ts),
 * `scheduled` the cron's one line a run (src/index.ts), the rest errors, warnings and notes.
 */
export function meterConsole() {
  for (const level of ["log", "info", "warn", "error", "debug"] as const) {
    const write = console[level].bind(console);
    console[level] = (...args: unknown[]) => {
      logs.lines++;
      const first = typeof args[0] === "string" ? args[0] : "";
      if (first.startsWith('{"level":"info","msg":"request"') || first.startsWith('{"level":"error","msg":"request"'))
        logs.access++;
      else if (first.includes('"msg":"scheduled"')) logs.cron++;
      write(...args);
    };
  }
}
let windowStart = Date.now();

function objectMeter(className: string, id: string) {
  let byId = objects.get(className);
  if (!byId) objects.set(className, (byId = new Map()));
  let m = byId.get(id);
  if (!m) byId.set(id, (m = new ObjectMeter()));
  return m;
}

type MeterEnv = { DB?: D1Database; IMAGES?: R2Bucket };

/** The env a metered sender sees: the same bindings, its D1 rows counted as its own. */
function senderEnv<E extends MeterEnv>(env: E, rows: D1Rows): E {
  const DB = env.DB ? d1RowsInto(env.DB, rows) : env.DB;
  const IMAGES = env.IMAGES ? meteredBucket(env.IMAGES) : env.IMAGES;
  return { ...env, ...(DB ? { DB } : {}), ...(IMAGES ? { IMAGES } : {}) };
}

type ObjectClass = abstract new (ctx: DurableObjectState, env: never) => object;

/** The class `Base`, metered as `className`. */
export function metered<C extends ObjectClass>(Base: C, className: string): C {
  const Parent = Base as unknown as new (ctx: DurableObjectState, env: MeterEnv) => object;
  class Metered extends Parent {
    constructor(ctx: DurableObjectState, env: MeterEnv) {
      const meter = objectMeter(className, ctx.id.toString());
      // Before the object's constructor, which reads its storage already.
      if (ctx.storage) meter.settleStorage = meterStorage(ctx.storage, meter.storage);
      super(ctx, senderEnv(env, meter.d1));
      meter.counts.starts++;
      const waitUntil = ctx.waitUntil.bind(ctx);
      ctx.waitUntil = (work: Promise<unknown>) => {
        meter.waitUntil(Promise.resolve(work));
        return waitUntil(work);
      };
      return new Proxy(this, callsThrough(meter));
    }
  }
  return Metered as unknown as C;
}

/** The proxy the runtime calls the object through: each method call passes the meter. */
function callsThrough(meter: ObjectMeter): ProxyHandler<object> {
  const wrappers = new Map<string, (...args: unknown[]) => unknown>();
  const wrap = (target: object, method: string) =>
    function (...args: unknown[]) {
      const fn = Reflect.get(target, method, target) as (...a: unknown[]) => unknown;
      const started = Date.now();
      meter.enter(KINDS[method] ?? "rpc");
      const leave = () => meter.leave(method, started);
      try {
        const out = fn.apply(target, args);
        if (out instanceof Promise) return out.finally(leave);
        leave();
        return out;
      } catch (err) {
        leave();
        throw err;
      }
    };
  return {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      // Methods of the class (the prototype chain), not the instance's own function fields.
      if (
        typeof prop !== "string" ||
        typeof value !== "function" ||
        prop === "constructor" ||
        Object.hasOwn(target, prop)
      )
        return value;
      let w = wrappers.get(prop);
      if (!w) wrappers.set(prop, (w = wrap(target, prop)));
      return w;
    },
  };
}

/** The Worker's handler, metered (the local routes aside: ./index.ts answers them first). */
export function meteredWorker<H extends ExportedHandler<never>>(handler: H): H {
  const { fetch, scheduled } = handler as unknown as ExportedHandler<MeterEnv>;
  const metered: ExportedHandler<MeterEnv> = {
    ...(handler as unknown as ExportedHandler<MeterEnv>),
    fetch:
      fetch &&
      ((request, env, ctx) => {
        worker.requests++;
        const answer = fetch(request, senderEnv(env, worker.d1), ctx);
        const read = request.method === "GET" || request.method === "HEAD";
        return Promise.resolve(answer).then((res) => {
          if (!read || res.status >= 500) worker.writeRequests++;
          return res;
        });
      }),
    scheduled:
      scheduled &&
      ((controller, env, ctx) => {
        worker.scheduled++;
        // A run's work goes on in waitUntil after the handler returns: counted until it settles,
        // so a reader can tell a tick's rows are all in (`cron_pending` 0: no run's handler or work).
        const track = (work: Promise<unknown>) => {
          worker.cronPending++;
          void work.then(
            () => worker.cronPending--,
            () => worker.cronPending--,
          );
          return work;
        };
        const waitUntil = ctx.waitUntil.bind(ctx);
        ctx.waitUntil = (work: Promise<unknown>) => waitUntil(track(Promise.resolve(work)));
        return track(Promise.resolve(scheduled(controller, senderEnv(env, worker.cronD1), ctx))).then(() => {});
      }),
  };
  return metered as unknown as H;
}

type ObjectReading = ReturnType<ObjectMeter["reading"]>;
const NUMERIC = [
  "requests",
  "rpc",
  "fetch",
  "alarm",
  "ws_messages",
  "ws_events",
  "starts",
  "awake_ms",
  "idle_tail_ms",
  "in_flight",
  "waiting_until",
] as const;

/** What the meter has counted since the window began; `reset` begins a new window after reading. */
export function meterReading({ reset = false } = {}) {
  const now = Date.now();
  const classes: Record<string, Record<string, unknown>> = {};
  for (const [className, byId] of objects) {
    const sum: Record<string, number> = Object.fromEntries(NUMERIC.map((k) => [k, 0]));
    const d1 = { statements: 0, rows_read: 0, rows_written: 0 };
    const storage = { rows_read: 0, rows_written: 0, alarms_set: 0, stored_bytes: 0 };
    const methods: Record<string, { calls: number; ms: number; max_ms: number }> = {};
    const statements = new Map<string, { calls: number; rows_read: number; rows_written: number }>();
    const instances: Record<string, ObjectReading> = {};
    for (const [id, m] of byId) {
      const r = m.reading(now);
      // Stored bytes are every object's, busy in this window or not: storage is billed by the month.
      storage.stored_bytes += r.storage.stored_bytes;
      // Objects that did nothing in this window are left out.
      if (!r.requests && !r.awake_ms && !r.ws_events && !r.in_flight && !r.d1.statements) continue;
      instances[id] = r;
      for (const k of NUMERIC) sum[k] += r[k];
      for (const k of ["statements", "rows_read", "rows_written"] as const) d1[k] += r.d1[k];
      for (const k of ["rows_read", "rows_written", "alarms_set"] as const) storage[k] += r.storage[k];
      for (const [text, use] of m.storage.byStatement) {
        let t = statements.get(text);
        if (!t) statements.set(text, (t = { calls: 0, rows_read: 0, rows_written: 0 }));
        t.calls += use.calls;
        t.rows_read += use.rowsRead;
        t.rows_written += use.rowsWritten;
      }
      for (const [name, use] of m.methods) {
        const t = (methods[name] ??= { calls: 0, ms: 0, max_ms: 0 });
        t.calls += use.calls;
        t.ms += use.ms;
        t.max_ms = Math.max(t.max_ms, use.max_ms);
      }
    }
    classes[className] = {
      ...sum,
      instances: Object.keys(instances).length,
      stored_instances: byId.size,
      d1,
      // By statement, the most rows first: where the class's storage rows went.
      storage: {
        ...storage,
        statements: [...statements]
          .map(([statement, use]) => ({ statement, ...use }))
          .sort((a, b) => b.rows_read + b.rows_written - (a.rows_read + a.rows_written)),
      },
      methods,
      by_instance: instances,
    };
  }
  const reading = {
    window: { since: new Date(windowStart).toISOString(), ms: now - windowStart },
    idle_before_hibernation_ms: IDLE_BEFORE_HIBERNATION_MS,
    worker: {
      requests: worker.requests,
      write_requests: worker.writeRequests,
      scheduled: worker.scheduled,
      d1: rowsReading(worker.d1),
      cron_d1: rowsReading(worker.cronD1),
      /** Cron runs' handlers and waitUntil work not settled yet: never reset, it is a state. */
      cron_pending: worker.cronPending,
    },
    logs: { lines: logs.lines, access_lines: logs.access, cron_lines: logs.cron },
    d1_stored_bytes: d1Stored.bytes,
    objects: classes,
    d1_unattributed: rowsReading(d1Unattributed),
    d1_rows_metered: d1RowsMetered(),
    r2: { ...r2Ops },
  };
  if (reset) resetMeter(now);
  return reading;
}

/** Starts a new measurement window. */
export function resetMeter(now = Date.now()) {
  for (const byId of objects.values()) for (const m of byId.values()) m.reset(now);
  // Zeroed in place: the Worker's D1 handle keeps adding to the same counters.
  worker.requests = worker.writeRequests = worker.scheduled = 0;
  logs.lines = logs.access = logs.cron = 0;
  Object.assign(worker.d1, zeroRows());
  Object.assign(worker.cronD1, zeroRows());
  Object.assign(d1Unattributed, zeroRows());
  resetR2Ops();
  windowStart = now;
}
