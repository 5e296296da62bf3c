/**
 * The crash-and-converge walk: a private local server (wrangler dev and its workerd, the cron
 * fired as `npm start` fires it) on a state directory that outlives it, real work driven at it
 * concurrently — host agents reporting over HTTP and over the channel, an operator's desired
 * writes, FleetLock locks and unlocks through two groups under a disruption budget, a rollout
 * with a strategy, a fleet spec apply, an image upload, enrollment, a drift fix, webhooks to a
 * receiver on this machine — and the whole process group killed with SIGKILL at a moment the seed
 * picks, several rounds, each restarted on the same state. Clients retry as real ones do (the
 * agents by themselves, operators until they get an answer). Then everything must agree again
 * within a bound: ledgers and the index, rollouts ended with nothing applying, no reboot slot or
 * budget unit held by nobody, every committed webhook event delivered, every committed change
 * audited, nothing half written.
 *
 * The seed picks the kill moments and the work's choices (`CRASH_SEED=<n>` replays them; timing
 * on a loaded machine still varies). `CRASH_SOAK=1` runs more rounds (`CRASH_ROUNDS` sets them).
 * Clients reach the server through a TCP relay on a fixed port, so they keep one URL across
 * restarts (every restart listens on another port) and see a crash as a real host would: the
 * connection drops.
 */
import { createHash, randomUUID } from "node:crypto";
import { createServer as createHttpServer } from "node:http";
import { connect, createServer as createTcpServer, type Socket } from "node:net";
import { appendFileSync, rmSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HostAgent } from "../agent/agent.ts";
import { MemoryDriver } from "../agent/memory-driver.ts";
import { startLocalServer, type LocalServer } from "../scripts/local-server.ts";
import { rng as seededRng } from "../sim/random.ts";
import { answerOf } from "../scripts/crash/harness.ts";

const SOAK = process.env.CRASH_SOAK === "1";
const SEED = Number(process.env.CRASH_SEED ?? Math.floor(Math.random() * 2 ** 31));
const ROUNDS = Number(process.env.CRASH_ROUNDS ?? (SOAK ? 20 : 4));
const CONVERGE_LIMIT_MS = Number(process.env.CRASH_CONVERGE_MS ?? 90_000);
/** Servers with a host agent: the first two take operators' desired writes, the rest rollouts. */
const HOSTS = 8;

/** The simulator's seeded generator, so a seed names the walk. */
const rng = seededRng(SEED);
const between = (lo: number, hi: number) => lo + Math.floor(rng() * (hi - lo));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const say = (s: string) => console.log(`[crash seed=${SEED}] ${s}`);

// ---------------------------------------------------------------------------------------------
// The relay: one fixed port in front of whichever server runs now.

let backendPort: number | null = null;
const open = new Set<Socket>();
const relay = createTcpServer((client) => {
  if (backendPort === null) return void client.destroy();
  const upstream = connect(backendPort, "127.0.0.1");
  open.add(client);
  open.add(upstream);
  const drop = () => {
    client.destroy();
    upstream.destroy();
    open.delete(client);
    open.delete(upstream);
  };
  client.on("error", drop).on("close", drop);
  upstream.on("error", drop).on("close", drop);
  client.pipe(upstream);
  upstream.pipe(client);
});
const relayPort = await new Promise<number>((resolve) =>
  relay.listen(0, "127.0.0.1", () => resolve((relay.address() as { port: number }).port)),
);
const url = `http://127.0.0.1:${relayPort}`;

// ---------------------------------------------------------------------------------------------
// The webhook receiver: takes everything, remembers every request.

interface Received {
  delivery: string;
  event: string;
  eventId: string;
  subject: string;
  body: string;
}
const received: Received[] = [];
const receiver = createHttpServer((req, res) => {
  let body = "";
  req.on("data", (d) => (body += d));
  req.on("end", () => {
    let parsed: any = {};
    try {
      parsed = JSON.parse(body);
    } catch {}
    received.push({
      delivery: String(req.headers["x-harbormaster-delivery"]),
      event: String(req.headers["x-harbormaster-event"]),
      eventId: String(parsed.id ?? ""),
      subject: String(parsed.subject ?? ""),
      body,
    });
    // A receiver that fails now and then: redeliveries cross the crashes too.
    res.writeHead(Math.random() < 0.2 ? 503 : 204).end();
  });
});
const receiverPort = await new Promise<number>((resolve) =>
  receiver.listen(0, "127.0.0.1", () => resolve((receiver.address() as { port: number }).port)),
);

// ---------------------------------------------------------------------------------------------
// The server: started, crashed with SIGKILL, started again on its state; the cron as npm start runs it.

let server: LocalServer | null = null;
let persist = "";
let admin = "";

async function startServer() {
  server = await startLocalServer({
    label: "crashwalk",
    reuse: persist ? { persist, admin } : undefined,
    parkTrustS: 2,
    devArgs: ["--test-scheduled"],
  });
  persist = server.persist;
  admin = server.admin;
  backendPort = Number(new URL(server.url).port);
}

function crashServer() {
  backendPort = null;
  server?.crash();
  // CRASH_LOG=<file>: every run's server output, for a failure's replay.
  if (process.env.CRASH_LOG && server)
    appendFileSync(process.env.CRASH_LOG, `--- run on ${server.url}\n${server.log()}`);
  for (const s of open) s.destroy();
  open.clear();
}

/** npm start fires /__scheduled each minute; the walk fires it more often so a bound stays short. */
let cronTimer: NodeJS.Timeout | null = null;
function startCron(everyMs: number) {
  cronTimer = setInterval(() => {
    if (backendPort !== null) fetch(`${url}/__scheduled`).catch(() => {});
  }, everyMs);
}

// ---------------------------------------------------------------------------------------------
// Clients.

interface Answer {
  status: number;
  json: any;
}

/** One call; a dropped connection is status 0. */
async function call(method: string, path: string, body?: unknown, token = admin, raw?: Uint8Array): Promise<Answer> {
  try {
    const res = await fetch(`${url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body !== undefined ? { "content-type": "application/json" } : {}),
        ...(raw !== undefined ? { "content-type": "application/octet-stream" } : {}),
      },
      body: raw ?? (body === undefined ? undefined : JSON.stringify(body)),
      signal: AbortSignal.timeout(30_000),
    });
    return await answerOf(res);
  } catch {
    return { status: 0, json: null };
  }
}

/**
 * An operator's client: asks again while the answer is lost (dropped connection, 5xx), as hm
 * and any HTTP client with retries does, for at most `ms`. The last answer, or status 0.
 */
async function retried(method: string, path: string, body?: unknown, token?: string, ms = 60_000): Promise<Answer> {
  const until = Date.now() + ms;
  let wait = 200;
  for (;;) {
    const a = await call(method, path, body, token);
    if (a.status !== 0 && a.status < 500) return a;
    if (Date.now() > until) return a;
    await sleep(wait);
    wait = Math.min(wait * 2, 2000);
  }
}

async function all(path: string): Promise<any[]> {
  const items: any[] = [];
  let cursor: string | null = null;
  do {
    const sep = path.includes("?") ? "&" : "?";
    const a = await call("GET", `${path}${sep}limit=200${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
    if (a.status !== 200) throw new Error(`GET ${path}: ${a.status} ${JSON.stringify(a.json)}`);
    items.push(...a.json.items);
    cursor = a.json.next_cursor ?? null;
  } while (cursor);
  return items;
}

// ---------------------------------------------------------------------------------------------
// What clients were told: the facts the checks hold the server to.

const fleet = `cw-${SEED.toString(36)}-${Date.now().toString(36)}`;
let keyPath = "";
interface Host {
  id: string;
  token: string;
  hostname: string;
  group: "a" | "b";
  fleetlockId: string;
  /** The highest desired generation acknowledged with a 2xx. */
  acked: number;
  agent: HostAgent;
  stop: AbortController;
}
const hosts: Host[] = [];
const ackedRollouts = new Set<string>();
const ackedSpecs: number[] = [];
const ackedImages = new Map<string, { digest: string; size: number }>();
const ackedTokens = new Set<string>();
const enrolled = new Map<string, { token: string; machine: string; server: string }>();
const grants: { id: string; at: number }[] = [];
let webhookId = "";
let specRevision = 0;

function fleetlock(op: "pre-reboot" | "steady-state", h: Host) {
  return fetch(`${url}${keyPath}/v1/${op}`, {
    method: "POST",
    headers: { "fleet-lock-protocol": "true" },
    body: JSON.stringify({ client_params: { id: h.fleetlockId, group: h.group } }),
    signal: AbortSignal.timeout(30_000),
  })
    .then(async (r) => ({ status: r.status, json: await r.json().catch(() => null) }))
    .catch(() => ({ status: 0, json: null }));
}

function startAgent(h: Omit<Host, "agent" | "stop">, transport: "channel" | "http"): Host {
  const stop = new AbortController();
  const agent = new HostAgent({
    url,
    token: h.token,
    driver: new MemoryDriver(),
    bootId: `boot-${h.id}`,
    transport,
    reportIntervalMs: 15_000,
    waitS: 20,
    backoff: { baseMs: 300, capMs: 3_000 },
    reconnect: { baseMs: 300, capMs: 3_000 },
  });
  void agent.run(stop.signal);
  return { ...h, agent, stop };
}

// ---------------------------------------------------------------------------------------------
// The work of one round: each loop runs until `stopped()` says so, then finishes what it started.

function work(round: number, stopped: () => boolean): Promise<unknown>[] {
  const loops: Promise<unknown>[] = [];

  // An operator's desired writes to the first two servers.
  for (const h of hosts.slice(0, 2))
    loops.push(
      (async () => {
        while (!stopped()) {
          const generation = h.acked + 1;
          const a = await retried("PUT", `/v1/servers/${h.id}/desired`, {
            generation,
            agents: [{ name: "app", image: `app:op${generation}`, version: `op${generation}` }],
          });
          if (a.status === 200) h.acked = Math.max(h.acked, a.json.generation);
          // A retry of a write that did commit finds it there (stale_generation, generation_conflict).
          else if (a.status === 409)
            h.acked = Math.max(h.acked, (await retried("GET", `/v1/servers/${h.id}`)).json.desired_generation);
          await sleep(between(50, 400));
        }
      })(),
    );

  // Zincati on four servers: lock, hold a moment, unlock (asked again until the unlock is
  // answered). A lock whose answer was lost is asked for again, as Zincati does, before the loop
  // ends: a grant committed just before the crash is that host's, and only its unlock frees it.
  for (const h of hosts.slice(2, 6))
    loops.push(
      (async () => {
        let unsure = false;
        while (!stopped() || unsure) {
          const fresh = !unsure;
          const pre = await fleetlock("pre-reboot", h);
          unsure = pre.status === 0 || pre.status >= 500;
          if (pre.status === 200) {
            // After an answered unlock, a 200 is a new grant; after a lost answer it may be the same one.
            if (fresh) grants.push({ id: h.fleetlockId, at: Date.now() });
            await sleep(between(50, 600));
            for (let i = 0; i < 200; i++) {
              if ((await fleetlock("steady-state", h)).status === 200) break;
              await sleep(300);
            }
          }
          await sleep(unsure ? 300 : between(100, 700));
        }
      })(),
    );

  // A rollout with a strategy (on odd rounds through reboot slots), of each agent in turn: a
  // start the crash cut off after its claim is finished by this same request's retry
  // (docs/rollouts.md), and answered 201 like one that was not cut off.
  loops.push(
    (async () => {
      await sleep(between(0, 800));
      const agent = round % 2 === 1 ? "app" : "side";
      const a = await retried("POST", "/v1/rollouts", {
        fleet,
        agent,
        image: `${agent}:r${round}`,
        version: `r${round}`,
        exclude: hosts.slice(0, 2).map((h) => h.id),
        concurrency: 2,
        server_timeout_s: 120,
        reboot_slot: round % 2 === 1,
        strategy: {
          steps: [
            { type: "canary", count: 1 },
            { type: "wave", percent: 100 },
          ],
        },
      });
      if (a.status === 201) ackedRollouts.add(a.json.id);
      say(`round ${round}: rollout start answered ${a.status}${a.status === 201 ? "" : ` ${JSON.stringify(a.json)}`}`);
    })(),
  );

  // A fleet spec apply: its settings and a server's label name the same revision.
  loops.push(
    (async () => {
      await sleep(between(0, 1200));
      const n = ++specRevision;
      const a = await retried("PUT", `/v1/fleets/${fleet}/spec`, spec(n));
      if (a.status === 200 || a.status === 201) ackedSpecs.push(n);
    })(),
  );

  // An image upload: register, its one part, complete.
  loops.push(
    (async () => {
      await sleep(between(0, 1200));
      const bytes = Buffer.from(`image of round ${round} seed ${SEED} ${randomUUID()}`.repeat(40));
      const digest = `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
      const reg = await retried("POST", "/v1/images", {
        name: "app",
        version: `img-${round}-${randomUUID().slice(0, 8)}`,
        kind: "tarball",
        digest,
        size: bytes.length,
      });
      if (reg.status !== 201) return;
      const id = reg.json.id as string;
      for (let i = 0; i < 30; i++) {
        const r = await call("PUT", `/v1/images/${id}/parts/1`, undefined, admin, bytes);
        if (r.status === 200) break;
        await sleep(500);
      }
      const done = await retried("POST", `/v1/images/${id}/complete`, {});
      if (done.status === 200) ackedImages.set(id, { digest, size: bytes.length });
    })(),
  );

  // Enrollment: a token, then two machines enroll with it (each retried with its machine id).
  loops.push(
    (async () => {
      await sleep(between(0, 1200));
      const t = await retried("POST", `/v1/fleets/${fleet}/enrollment-tokens`, {
        name: `round ${round}`,
        max_uses: 5,
        expires_at: new Date(Date.now() + 3_600_000).toISOString(),
      });
      if (t.status !== 201) return;
      ackedTokens.add(t.json.id ?? t.json.enrollment_token?.id);
      for (let m = 0; m < 2; m++) {
        const machine = randomUUID().replace(/-/g, "");
        const hostname = `enr-${round}-${m}.example.com`;
        const e = await retried(
          "POST",
          "/v1/agent/enroll",
          { hostname, machine_id: machine, boot_id: randomUUID() },
          t.json.token,
        );
        if (e.status === 201 || e.status === 200)
          enrolled.set(hostname, { token: t.json.id ?? "", machine, server: e.json.id ?? e.json.server?.id });
      }
    })(),
  );

  // A drift fix over the fleet (it takes budget units for the servers it re-issues).
  loops.push(
    (async () => {
      await sleep(between(0, 1500));
      await retried("POST", "/v1/check/server-agents/fix", { fleet, dry_run: false });
    })(),
  );

  // A registration (a retry of one that committed finds its hostname taken).
  loops.push(
    (async () => {
      await sleep(between(0, 1500));
      await retried("POST", "/v1/servers", { fleet, hostname: `late-${round}.example.com`, kind: "manual" });
    })(),
  );
  return loops;
}

/** Group b queues its hosts: parked FleetLock requests cross the crashes. */
const group = (g: "a" | "b") => (g === "a" ? { slots: 2 } : { slots: 2, queue_wait_s: 5 });

function spec(n: number) {
  return {
    apiVersion: "harbormaster/v1",
    kind: "FleetSpec",
    fleet,
    settings: { stale_after_s: 600 + n, lock_ttl_s: 3600 + n },
    reboot_groups: { a: group("a"), b: group("b") },
    servers: Object.fromEntries(hosts.slice(6).map((h) => [h.hostname, { labels: { rev: `r${n}` } }])),
  };
}

// ---------------------------------------------------------------------------------------------
// The checks: each returns what is wrong now (empty when everything agrees).

async function problems(): Promise<string[]> {
  const out: string[] = [];
  const index = await all(`/v1/servers?fleet=${fleet}`);
  const byId = new Map(index.map((r) => [r.id, r]));

  // Every server's index row agrees with its ledger, and its instance rows with its agents.
  for (const row of index) {
    const ledger = await call("GET", `/v1/servers/${row.id}`);
    if (ledger.status !== 200) {
      out.push(`server ${row.hostname}: ledger answered ${ledger.status}`);
      continue;
    }
    const v = ledger.json;
    for (const f of ["status", "state", "desired_generation", "reported_generation", "fleetlock_id", "reboot_group"])
      if (row[f] !== v[f]) out.push(`server ${row.hostname}: index ${f}=${row[f]}, ledger ${v[f]}`);
    if (JSON.stringify(row.labels) !== JSON.stringify(v.labels))
      out.push(
        `server ${row.hostname}: index labels ${JSON.stringify(row.labels)}, ledger ${JSON.stringify(v.labels)}`,
      );
    const instances = await all(`/v1/instances?server=${row.id}`);
    const fromIndex = instances.map((i) => `${i.agent}=${i.desired?.image ?? "-"}/${i.status}`).sort();
    const fromLedger = v.agents.map((a: any) => `${a.name}=${a.desired?.image ?? "-"}/${a.status}`).sort();
    if (JSON.stringify(fromIndex) !== JSON.stringify(fromLedger))
      out.push(`server ${row.hostname}: index agents ${fromIndex.join(",")}, ledger ${fromLedger.join(",")}`);
  }
  for (const h of hosts) {
    const row = byId.get(h.id);
    if (!row) out.push(`server ${h.hostname}: no index row`);
    else if (row.desired_generation < h.acked)
      out.push(`server ${h.hostname}: acknowledged generation ${h.acked} lost (${row.desired_generation})`);
    // A live agent realizes what its ledger wants.
    else if (row.status !== "realized") out.push(`server ${h.hostname}: ${row.status}, not realized`);
  }

  // Rollouts end (none is paused by these strategies), and no target stays applying or queued.
  const rollouts = await all(`/v1/rollouts?fleet=${fleet}`);
  for (const id of ackedRollouts)
    if (!rollouts.some((r) => r.id === id)) out.push(`rollout ${id}: acknowledged, not in the index`);
  for (const r of rollouts) {
    const one = await call("GET", `/v1/rollouts/${r.id}`);
    if (!["succeeded", "failed", "cancelled", "rolled_back"].includes(one.json?.state))
      out.push(`rollout ${r.id}: ${one.json?.state} (${JSON.stringify(one.json?.blocked_by ?? [])})`);
    if (r.state !== one.json?.state) out.push(`rollout ${r.id}: index says ${r.state}, object ${one.json?.state}`);
    const targets = await all(`/v1/rollouts/${r.id}/targets`);
    for (const t of targets)
      if (["applying", "queued", "waiting_budget", "waiting_slot"].includes(t.state))
        out.push(`rollout ${r.id}: target ${t.hostname} still ${t.state}`);
  }

  // No reboot slot held by nobody: every Zincati unlocked and every rollout ended.
  for (const g of ["a", "b"]) {
    const group = await call("GET", `/v1/fleets/${fleet}/reboot-groups/${g}`);
    for (const holder of group.json?.holders ?? []) out.push(`group ${g}: slot still held by ${holder.id}`);
    if (group.json?.queue?.length) out.push(`group ${g}: ${group.json.queue.length} host(s) still queued`);
  }

  // No budget unit held by nobody: three servers (two groups of two slots) may all go now, the budget being 3.
  if (!out.length) {
    const probe = [hosts[2], hosts[3], hosts[4]];
    const answers = [];
    for (const h of probe) answers.push(await fleetlock("pre-reboot", h));
    for (const [i, h] of probe.entries()) if (answers[i].status === 200) await fleetlock("steady-state", h);
    if (answers.some((a) => a.status !== 200))
      out.push(
        `budget: three servers not all granted: ${answers.map((a) => `${a.status} ${JSON.stringify(a.json)}`).join("; ")}`,
      );
  }

  // Every delivery the log holds reached the receiver, with one id per event.
  const deliveries = await call("GET", `/v1/fleets/${fleet}/webhooks/${webhookId}/deliveries?limit=500`);
  for (const d of deliveries.json?.items ?? []) {
    if (d.status !== "delivered") out.push(`delivery ${d.id} (${d.event}): ${d.status}`);
    else if (!received.some((r) => r.delivery === d.id)) out.push(`delivery ${d.id} (${d.event}): never received`);
  }
  const idsPerEvent = new Map<string, Set<string>>();
  for (const r of received) idsPerEvent.set(r.eventId, (idsPerEvent.get(r.eventId) ?? new Set()).add(r.delivery));
  for (const [event, ids] of idsPerEvent)
    if (ids.size > 1) out.push(`event ${event}: received under ${ids.size} delivery ids`);
  // Every committed registration and rollout start told the webhook.
  for (const row of index)
    if (!received.some((r) => r.event === "server.registered" && r.subject === `server:${row.id}`))
      out.push(`server ${row.hostname}: no server.registered delivered`);
  for (const r of rollouts)
    if (!received.some((x) => x.event === "rollout.started" && x.subject === `rollout:${r.id}`))
      out.push(`rollout ${r.id}: no rollout.started delivered`);

  // Audit rows for every committed operator change.
  const audit = await all(`/v1/audit`);
  const audited = new Set(audit.map((e) => `${e.action} ${e.target}`));
  for (const row of index)
    if (!audited.has(`server.register ${`server:${row.id}`}`) && !audited.has(`server.enroll server:${row.id}`))
      out.push(`server ${row.hostname}: registration not audited`);
  for (const r of rollouts)
    if (!audited.has(`rollout.start rollout:${r.id}`)) out.push(`rollout ${r.id}: start not audited`);
  for (const h of hosts.slice(0, 2)) {
    const gens = new Set(
      audit
        .filter((e) => e.action === "server.desired.put" && e.target === `server:${h.id}`)
        .map((e) => e.details?.generation),
    );
    const now = byId.get(h.id)?.desired_generation ?? 0;
    for (let g = 2; g <= now; g++) if (!gens.has(g)) out.push(`server ${h.hostname}: generation ${g} not audited`);
  }
  for (const h of hosts.slice(2, 6)) {
    const granted = audit.filter((e) => e.action === "fleetlock.grant" && e.details?.id === h.fleetlockId).length;
    const acked = grants.filter((g) => g.id === h.fleetlockId).length;
    if (granted < acked) out.push(`${h.fleetlockId}: ${acked} grants answered, ${granted} audited`);
  }
  const specApplies = audit.filter((e) => e.action === "fleet.spec.apply" && e.target === `fleet:${fleet}`).length;
  if (specApplies < ackedSpecs.length)
    out.push(`spec: ${ackedSpecs.length} applies acknowledged, ${specApplies} audited`);

  // No half-written spec apply: the settings and the labels name one revision.
  const fleetRow = await call("GET", `/v1/fleets/${fleet}`);
  const rev = (fleetRow.json?.stale_after_s ?? 0) - 600;
  if (fleetRow.json?.lock_ttl_s - 3600 !== rev)
    out.push(`spec: stale_after_s says revision ${rev}, lock_ttl_s ${fleetRow.json?.lock_ttl_s - 3600}`);
  if (ackedSpecs.length && rev < Math.max(...ackedSpecs))
    out.push(`spec: revision ${rev} < acknowledged ${Math.max(...ackedSpecs)}`);
  for (const h of hosts.slice(6))
    if (byId.get(h.id)?.labels?.rev !== `r${rev}`)
      out.push(`spec: ${h.hostname} has label rev=${byId.get(h.id)?.labels?.rev}, settings say r${rev}`);

  // No half-written upload: an acknowledged image is ready with its digest; a ready image was audited complete.
  const images = await all(`/v1/images?name=app`);
  for (const [id, want] of ackedImages) {
    const img = images.find((i) => i.id === id);
    if (!img || img.state !== "ready" || img.digest !== want.digest || img.size !== want.size)
      out.push(`image ${id}: acknowledged complete, now ${JSON.stringify(img ?? null)}`);
  }
  for (const img of images) {
    if (!audited.has(`image.register image:${img.id}`)) out.push(`image ${img.id}: registration not audited`);
    if (img.state === "ready" && !audited.has(`image.upload_complete image:${img.id}`))
      out.push(`image ${img.id}: ready, completion not audited`);
  }

  // Enrollment tokens: each audited; a round's uses are the machines it enrolled (a create whose
  // answer was lost left another token of that round, complete, whose secret nobody holds).
  const tokens = await all(`/v1/fleets/${fleet}/enrollment-tokens`);
  for (const id of ackedTokens) if (!tokens.some((t) => t.id === id)) out.push(`enrollment token ${id}: lost`);
  const usesOfRound = new Map<string, number>();
  for (const t of tokens) {
    if (!audited.has(`enrollment_token.create enrollment-token:${t.id}`))
      out.push(`enrollment token ${t.id}: not audited`);
    const round = /^round (\d+)$/.exec(t.name ?? "")?.[1];
    if (round !== undefined) usesOfRound.set(round, (usesOfRound.get(round) ?? 0) + t.uses);
  }
  for (const [round, uses] of usesOfRound) {
    const servers = index.filter((r) => r.hostname.startsWith(`enr-${round}-`)).length;
    if (uses !== servers) out.push(`enrollment tokens of round ${round}: ${uses} uses, ${servers} servers`);
  }
  for (const [hostname] of enrolled)
    if (!index.some((r) => r.hostname === hostname)) out.push(`enrolled ${hostname}: acknowledged, no server`);
  return out;
}

// ---------------------------------------------------------------------------------------------

beforeAll(async () => {
  say(`replay with CRASH_SEED=${SEED}; ${ROUNDS} rounds`);
  await startServer();
  startCron(10_000);
  expect(
    (
      await call("POST", "/v1/fleets", {
        id: fleet,
        disruption_budget: { max_unavailable: 3, per_label: {} },
      })
    ).status,
  ).toBe(201);
  keyPath = new URL((await call("POST", `/v1/fleets/${fleet}/fleetlock-key`)).json.base_url).pathname.replace(
    /\/$/,
    "",
  );
  for (const g of ["a", "b"] as const)
    expect((await call("PUT", `/v1/fleets/${fleet}/reboot-groups/${g}`, group(g))).status).toBe(200);
  const hook = await call("POST", `/v1/fleets/${fleet}/webhooks`, {
    url: `http://127.0.0.1:${receiverPort}/hook`,
    events: [
      "server.registered",
      "rollout.started",
      "rollout.succeeded",
      "rollout.failed",
      "rollout.step_started",
      "reboot.granted",
      "reboot.released",
      "audit.recorded",
    ],
  });
  expect(hook.status).toBe(201);
  webhookId = hook.json.webhook.id;
  for (let i = 0; i < HOSTS; i++) {
    const group = i % 2 === 0 ? "a" : "b";
    const hostname = `h${i}.example.com`;
    const r = await call("POST", "/v1/servers", {
      fleet,
      hostname,
      kind: "managed",
      reboot_group: group,
      fleetlock_id: `fl-${i}`,
      labels: { zone: `z${i % 3}` },
    });
    expect(r.status).toBe(201);
    const d = await call("PUT", `/v1/servers/${r.json.id}/desired`, {
      generation: 2,
      agents: [
        { name: "app", image: "app:r0", version: "r0" },
        { name: "side", image: "side:r0", version: "r0" },
      ],
    });
    expect(d.status).toBe(200);
    hosts.push(
      startAgent(
        { id: r.json.id, token: r.json.token, hostname, group, fleetlockId: `fl-${i}`, acked: 2 },
        i % 2 === 0 ? "channel" : "http",
      ),
    );
  }
}, 180_000);

afterAll(async () => {
  for (const h of hosts) h.stop.abort();
  if (cronTimer) clearInterval(cronTimer);
  crashServer();
  if (persist) rmSync(persist, { recursive: true, force: true });
  await new Promise<void>((r) => relay.close(() => r()));
  receiver.closeAllConnections();
  await new Promise<void>((r) => receiver.close(() => r()));
});

describe("kill -9 at random moments under concurrent work", () => {
  it(
    "converges: ledgers and index agree, rollouts end, nothing held by nobody, events delivered, changes audited",
    async () => {
      const took: number[] = [];
      for (let round = 1; round <= ROUNDS; round++) {
        let stop = false;
        const loops = work(round, () => stop);
        const killAfter = between(300, 3000);
        await sleep(killAfter);
        crashServer();
        const down = between(0, 800);
        await sleep(down);
        const t0 = Date.now();
        await startServer();
        say(`round ${round}: killed after ${killAfter} ms, down ${down} ms, restarted in ${Date.now() - t0} ms`);
        // Sometimes again while it recovers: the alarms and outboxes of the first crash mid-delivery.
        if (rng() < 0.4) {
          const again = between(100, 1500);
          await sleep(again);
          crashServer();
          await startServer();
          say(`round ${round}: killed again ${again} ms into its recovery`);
        }
        // The clients go on a moment on the new server, then finish what they started.
        await sleep(between(200, 1500));
        stop = true;
        await Promise.all(loops);
        // Then everything agrees again within the bound, before the next kill.
        const t1 = Date.now();
        let last: string[] = [];
        for (let look = 0; ; look++) {
          last = await problems();
          if (look === 0 && last.length) say(`round ${round}, first look: ${last.join("; ")}`);
          if (!last.length || Date.now() - t1 > CONVERGE_LIMIT_MS) break;
          await sleep(2000);
        }
        took.push(Date.now() - t1);
        say(`round ${round}: ${last.length ? "NOT converged" : "converged"} in ${Date.now() - t1} ms`);
        expect(last, `round ${round}; replay with CRASH_SEED=${SEED}`).toEqual([]);
      }
      const sorted = [...took].sort((a, b) => a - b);
      say(
        `${ROUNDS} rounds converged, after the clients finished: median ${sorted[Math.floor(sorted.length / 2)]} ms, max ${sorted.at(-1)} ms; ` +
          `${ackedRollouts.size} rollouts, ${ackedSpecs.length} spec applies, ${ackedImages.size} images, ${enrolled.size} enrolled, ` +
          `${grants.length} FleetLock grants, ${received.length} webhook requests received`,
      );
    },
    SOAK ? 3_600_000 : 300_000,
  );
});
