/**
 * The audit trail out: GET /v1/audit/export (NDJSON pages resumed by cursor), the cron's day files
 * in R2 with their digest chain (src/audit/archive.service.ts), the days served to `hm audit
 * verify`, and the retention that never prunes a row no day file holds yet.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { DAY_MS, dayKey, dayStart, verifyChain, type DownloadedDay } from "../src/audit/archive";
import { AUDIT_DAY_CURSOR, archiveAudit } from "../src/audit/archive.service";
import { pruneAudit } from "../src/audit/store";
import { getDb } from "../src/db/client";
import { AUDIT_EVENTS_CURSOR, sendAuditEvents } from "../src/audit/events.service";
import { bodiesOf, hook, receivedBy, receiver } from "./webhook-helpers";
import { coordinator } from "./support/objects";
import { fireTimersNow } from "./helpers";
import { ADMIN, BASE, call, checkedFetch, createFleet, d1Rows, registerServer } from "./helpers";
import { auditLines } from "../src/audit/service";

/** Audit rows written straight into D1, each `at` as given; returns their ids. */
async function rows(ats: number[], target = "fleet:audit-x", action = "test.row"): Promise<number[]> {
  const ids: number[] = [];
  for (const at of ats) {
    const r = await env.DB.prepare(
      "INSERT INTO audit_log (at, actor, action, target, details) VALUES (?, 'token:bootstrap', ?, ?, NULL) RETURNING id",
    )
      .bind(at, action, target)
      .first<{ id: number }>();
    ids.push(r!.id);
  }
  return ids;
}

/** Every page of the export from `start` (a query string), `limit` rows a page; `between` runs after each page. */
async function exportAll(start: string, limit: number, between?: (page: number) => Promise<void>, token?: string) {
  const out: { id: number; action: string; target: string }[] = [];
  let query = start;
  for (let page = 0; page < 100; page++) {
    const res = await call("GET", `/v1/audit/export?limit=${limit}&${query}`, { token });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toContain("application/x-ndjson");
    const text = typeof res.json === "string" ? res.json : res.json === null ? "" : JSON.stringify(res.json) + "\n";
    const lines = text.split("\n").filter(Boolean);
    expect(lines.length).toBeLessThanOrEqual(limit);
    out.push(...lines.map((l) => JSON.parse(l)));
    await between?.(page);
    query = `cursor=${res.headers.get("x-next-cursor")}`;
    if (res.headers.get("x-more") === "false") return { out, cursor: res.headers.get("x-next-cursor")! };
  }
  throw new Error("the export never ended");
}

const ids = (xs: { id: number }[]) => xs.map((x) => x.id);

describe("GET /v1/audit/export", () => {
  it("streams every row once, in id order, across pages, equal times, a day boundary and rows written meanwhile", async () => {
    const base = Date.parse("2031-03-04T23:59:59.000Z");
    // Three rows at the same millisecond, then rows after midnight.
    const first = await rows([base, base, base, base + 1000, base + 2000], "fleet:audit-x", "export.a");
    const added: number[] = [];
    const { out, cursor } = await exportAll(`since=${new Date(base).toISOString()}`, 2, async (page) => {
      // Written while the client reads: dated before `since` too (an outbox delivering late).
      if (page === 0) added.push(...(await rows([base + 5000, base - 60_000], "fleet:audit-x", "export.a")));
    });
    const mine = out.filter((r) => r.action === "export.a");
    expect(ids(mine)).toEqual([...first, ...added]);
    expect(new Set(ids(out)).size).toBe(out.length);
    expect(ids(out)).toEqual([...ids(out)].sort((a, b) => a - b));
    // Resuming with the last cursor: nothing again, then exactly what came since.
    const later = await rows([base + 9000], "fleet:audit-x", "export.a");
    const again = await exportAll(`cursor=${cursor}`, 2);
    expect(ids(again.out)).toEqual(later);
  });

  it("resumed mid-stream from any cursor, gives the rest once", async () => {
    const base = Date.parse("2031-05-01T12:00:00.000Z");
    const all = await rows([base, base, base, base, base, base, base], "fleet:audit-x", "export.b");
    const res = await call("GET", `/v1/audit/export?limit=3&since=${new Date(base).toISOString()}`);
    const firstPage = (res.json as string)
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l));
    expect(ids(firstPage)).toEqual(all.slice(0, 3));
    // A client killed after the first page resumes with its cursor.
    const rest = await exportAll(`cursor=${res.headers.get("x-next-cursor")}`, 2);
    expect(ids(rest.out.filter((r) => r.action === "export.b"))).toEqual(all.slice(3));
  });

  it("exports a fleet-scoped token's fleets only", async () => {
    const fa = (await createFleet()).id as string;
    const fb = (await createFleet()).id as string;
    const base = Date.parse("2031-06-01T00:00:00.000Z");
    const a = await rows([base, base + 1], `fleet:${fa}`, "export.c");
    await rows([base + 2], `fleet:${fb}`, "export.c");
    const created = await call("POST", "/v1/tokens", { body: { name: "a-only", scope: "read", fleets: [fa] } });
    expect(created.status).toBe(201);
    const { out } = await exportAll(`since=${new Date(base).toISOString()}`, 50, undefined, created.json.token);
    expect(ids(out.filter((r) => r.action === "export.c"))).toEqual(a);
    expect(out.some((r) => r.target === `fleet:${fb}`)).toBe(false);
    // The day files hold every fleet: not for a scoped token.
    const days = await call("GET", "/v1/audit/days", { token: created.json.token });
    expect(days.status).toBe(403);
  });

  it("refuses a bad cursor, a bad since, a page over the cap and a day that is none, as 400s; an absent day is 404", async () => {
    for (const q of ["cursor=nope", "since=yesterday", "since=2031-13-45T00:00:00Z", "limit=0", "limit=5001"]) {
      const res = await call("GET", `/v1/audit/export?${q}`);
      expect(res.status, q).toBe(400);
      expect(res.json.error.code).toMatch(/invalid_/);
    }
    expect((await call("GET", "/v1/audit/days?from=2026-02-30")).json.error.code).toBe("invalid_query");
    expect((await call("GET", "/v1/audit/days/2026-02-30")).json.error.code).toBe("invalid_param");
    expect((await call("GET", "/v1/audit/days/1999-01-01")).status).toBe(404);
  });
});

/** Every day file through the API, as `hm audit verify` downloads them. */
async function download(): Promise<DownloadedDay[]> {
  const list = await call("GET", "/v1/audit/days");
  expect(list.status).toBe(200);
  const out: DownloadedDay[] = [];
  for (const d of list.json.items) {
    const res = await checkedFetch(`${BASE}/v1/audit/days/${d.day}`, { headers: { Authorization: `Bearer ${ADMIN}` } });
    expect(res.status).toBe(200);
    out.push({ day: d.day, text: await res.text() });
  }
  return out;
}

/** Today (UTC), real: rows written through the API are dated now, so the chain starts near it. */
const T0 = dayStart(Date.now());
const name = (start: number) => new Date(start).toISOString().slice(0, 10);

describe("the day files", () => {
  it("cuts each day once it is over, chains them, holds every row once, and shows a tampered or missing day", async () => {
    // The oldest rows: the chain starts on their day.
    const d0 = T0 - 3 * DAY_MS;
    await rows([d0 + 1000, d0 + 2000], "fleet:audit-x", "day.row");
    await rows([d0 + DAY_MS + 5, T0 - 1], "fleet:audit-x", "day.other");
    const now = T0 + 3 * DAY_MS + 12 * 3_600_000;
    const cut: string[] = [];
    for (let i = 0; i < 20; i++) {
      const r = await archiveAudit(env, now);
      if (r.cut.length === 0) break;
      cut.push(...r.cut);
    }
    expect(cut).toEqual([0, 1, 2, 3, 4, 5].map((i) => name(d0 + i * DAY_MS)));
    // Not the day in progress.
    expect(await env.IMAGES.head(dayKey(dayStart(now)))).toBeNull();

    const days = await download();
    expect(days.map((d) => d.day)).toEqual(cut);
    expect(await verifyChain(days)).toBeNull();
    // Every row once, in order: the files concatenated are the export, across the day boundaries.
    const inFiles = days.flatMap((d) =>
      d.text
        .split("\n")
        .filter(Boolean)
        .slice(1)
        .map((l) => JSON.parse(l).id),
    );
    // (The files are cut by id: a file holds the rows recorded by its day's end, whatever their dates.)
    const lastId = JSON.parse(days.at(-1)!.text.split("\n")[0]).last_id;
    const inD1 = (
      await env.DB.prepare("SELECT id FROM audit_log WHERE id <= ? ORDER BY id").bind(lastId).all<{ id: number }>()
    ).results.map((r) => r.id);
    expect(inFiles).toEqual(inD1);
    const dated = await env.DB.prepare("SELECT max(id) AS id FROM audit_log WHERE at < ?")
      .bind(dayStart(now))
      .first<{ id: number }>();
    expect(lastId).toBe(dated!.id);

    // A later run rewrites nothing.
    const before = await env.IMAGES.head(dayKey(d0));
    await archiveAudit(env, now + 60_000);
    expect((await env.IMAGES.head(dayKey(d0)))!.etag).toBe(before!.etag);

    // Altered: one row's action changed in the first day's file.
    const tampered = days.map((d, j) => (j === 0 ? { ...d, text: d.text.replace("day.row", "day.ROW") } : d));
    const broken = await verifyChain(tampered);
    expect(broken?.day).toBe(days[1].day);
    expect(broken?.problem).toMatch(/altered/);
    // Missing: a day between two others dropped.
    const gap = await verifyChain(days.filter((_, j) => j !== 2));
    expect(gap).toEqual({ day: days[3].day, problem: `day ${days[2].day} is missing` });
    // The newest day, altered: only its recorded sha256 vouches for it.
    const newest = days.at(-1)!;
    const meta = (await env.IMAGES.head(dayKey(dayStart(now) - DAY_MS)))!.customMetadata!;
    const lastAltered = [...days.slice(0, -1), { ...newest, text: newest.text.replace('"rows":', '"rows": ') }];
    expect((await verifyChain(lastAltered, { day: newest.day, sha256: meta.sha256 }))?.day).toBe(newest.day);
    expect(await verifyChain(days, { day: newest.day, sha256: meta.sha256 })).toBeNull();
    // Tampered in R2 itself, then downloaded through the API.
    await env.IMAGES.put(dayKey(d0), tampered[0].text, { customMetadata: before!.customMetadata });
    expect(await verifyChain(await download())).toEqual({
      day: days[1].day,
      problem: `its link to ${days[0].day} does not match: ${days[0].day} was altered, or this one`,
    });
    await env.IMAGES.put(dayKey(d0), days[0].text, { customMetadata: before!.customMetadata });
  });

  it("after a crash between the file and the cursor, adopts the file as written: no duplicate, no gap", async () => {
    const day = T0 + 3 * DAY_MS;
    const now = day + DAY_MS + 30 * 60_000;
    for (let i = 0; i < 20 && (await archiveAudit(env, now)).cut.length; i++);
    expect(await cursorAt()).toBe(day);
    const etag = (await env.IMAGES.head(dayKey(day)))!.etag;
    // kill -9 after the put: the cursor still names the day before.
    await env.DB.prepare("UPDATE cron_cursors SET at = ? WHERE name = ?")
      .bind(day - DAY_MS, AUDIT_DAY_CURSOR)
      .run();
    // A row dated that day arrives late: a second cut would differ from the first.
    const [late] = await rows([day + 5], "fleet:audit-x", "day.late");
    const r = await archiveAudit(env, now);
    expect(r.cut).toEqual([name(day)]);
    expect((await env.IMAGES.head(dayKey(day)))!.etag).toBe(etag);
    expect(await cursorAt()).toBe(day);
    // The late row goes in the next day's file (cut once that day is over), once.
    await archiveAudit(env, now + DAY_MS);
    const next = await (await env.IMAGES.get(dayKey(day + DAY_MS)))!.text();
    expect(next.split("\n").filter((l) => l.includes(`"id":${late},`))).toHaveLength(1);
    expect(await verifyChain(await download())).toBeNull();
  });

  it("two overlapping runs write a day once: the one that finds it cut meanwhile adopts that file", async () => {
    // Where the test above left the chain: the last day cut is `day`.
    const day = T0 + 4 * DAY_MS;
    const now = day + DAY_MS + 30 * 60_000;
    for (let i = 0; i < 20 && (await archiveAudit(env, now)).cut.length; i++);
    expect(await cursorAt()).toBe(day);
    const kept = (await env.IMAGES.head(dayKey(day)))!;
    // A second run started before the first moved the cursor, and looked for the day's file
    // before the first wrote it: it cuts the day too, with a row that arrived in between.
    await env.DB.prepare("UPDATE cron_cursors SET at = ? WHERE name = ?")
      .bind(day - DAY_MS, AUDIT_DAY_CURSOR)
      .run();
    const [late] = await rows([day + 7], "fleet:audit-x", "day.late");
    let looked = false;
    const racing = {
      head: async (key: string) => {
        if (key !== dayKey(day) || looked) return env.IMAGES.head(key);
        looked = true;
        return null;
      },
      put: (...args: Parameters<R2Bucket["put"]>) => env.IMAGES.put(...args),
      get: (...args: Parameters<R2Bucket["get"]>) => env.IMAGES.get(...args),
      list: (...args: Parameters<R2Bucket["list"]>) => env.IMAGES.list(...args),
    } as unknown as R2Bucket;
    const r = await archiveAudit({ ...env, IMAGES: racing }, now);
    expect(looked).toBe(true);
    expect(r.cut).toEqual([name(day)]);
    // The first run's file stands, byte for byte; the chain goes on from it.
    const after = (await env.IMAGES.head(dayKey(day)))!;
    expect(after.etag).toBe(kept.etag);
    expect(after.customMetadata).toEqual(kept.customMetadata);
    expect(await cursorAt()).toBe(day);
    const text = await (await env.IMAGES.get(dayKey(day)))!.text();
    expect(text.includes(`"id":${late},`)).toBe(false);
    expect(await verifyChain(await download())).toBeNull();
  });
});

const cursorAt = async () =>
  (await env.DB.prepare("SELECT at FROM cron_cursors WHERE name = ?").bind(AUDIT_DAY_CURSOR).first<{ at: number }>())
    ?.at;

describe("retention", () => {
  it("prunes rows past AUDIT_RETENTION_DAYS only once a day file holds them", async () => {
    const old = T0 + 6 * DAY_MS + 10 * 3_600_000;
    for (let i = 0; i < 20 && (await archiveAudit(env, old)).cut.length; i++);
    const [kept] = await rows([old], "fleet:audit-x", "retention.row");
    const now = old + 20 * DAY_MS;
    const [young] = await rows([now - 2 * DAY_MS], "fleet:audit-x", "retention.row");
    const present = async (id: number) =>
      (await env.DB.prepare("SELECT id FROM audit_log WHERE id = ?").bind(id).first()) !== null;
    // 10 days' retention, judged at `now` (the row is 20 days old), but R2 refuses its day's file.
    const short = { ...env, AUDIT_RETENTION_DAYS: "10" };
    const outage = new Proxy(env.IMAGES, {
      get: (target, prop) =>
        prop === "put"
          ? () => Promise.reject(new Error("R2 down"))
          : ((target as any)[prop]?.bind?.(target) ?? (target as any)[prop]),
    });
    await expect(archiveAudit({ ...short, IMAGES: outage }, now)).rejects.toThrow("R2 down");
    expect(await present(kept)).toBe(true);
    expect(await env.IMAGES.head(dayKey(dayStart(old)))).toBeNull();
    // Once its day is cut, it goes; the young one stays (in D1 and in its file).
    let pruned = 0;
    for (let i = 0; i < 20; i++) {
      const r = await archiveAudit(short, now);
      pruned += r.pruned;
      if (!r.cut.length) break;
    }
    expect(await env.IMAGES.head(dayKey(dayStart(old)))).not.toBeNull();
    expect(await present(kept)).toBe(false);
    expect(pruned).toBeGreaterThan(0);
    expect(await present(young)).toBe(true);
    // A row an outbox delivers late, dated long ago, after the last cut: not pruned before a file holds it.
    const [late] = await rows([old], "fleet:audit-x", "retention.late");
    const lastId = Number((await env.IMAGES.head(dayKey(dayStart(now) - DAY_MS)))!.customMetadata!.last_id);
    expect(late).toBeGreaterThan(lastId);
    expect(await pruneAudit(getDb(env.DB), { exportedUpTo: lastId, before: now - 10 * DAY_MS, limit: 100 })).toBe(0);
    expect(await present(late)).toBe(true);
    const r = await archiveAudit(short, now + DAY_MS);
    expect(r.cut).toEqual([name(dayStart(now))]);
    expect(await present(late)).toBe(false);
  });
});

describe("the servers an audit page names", () => {
  it("are named in one read however many servers a page holds", async () => {
    const { id: fleet } = await createFleet();
    const server = await registerServer(fleet);
    const hostname = (await call("GET", `/v1/servers/${server.id}`)).json.hostname as string;
    const from = (await env.DB.prepare("SELECT max(id) AS id FROM audit_log").first<{ id: number }>())!.id;
    // An export page of 5,000 rows naming as many servers (all but one unknown here).
    await env.DB.prepare(
      `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 4998)
       INSERT INTO audit_log (at, actor, action, target, details)
       SELECT ?1, 'token:bootstrap', 'names.row', 'server:' || lower(hex(randomblob(4))) || '-0000-4000-8000-' || printf('%012d', i), NULL FROM n`,
    )
      .bind(Date.now())
      .run();
    const [real] = await rows([Date.now()], `server:${server.id}`, "names.real");
    let lines: Awaited<ReturnType<typeof auditLines>> = [];
    const reads = await d1Rows(async () => {
      lines = await auditLines(env, { after: from, limit: 5000 });
    });
    expect(lines).toHaveLength(5000);
    expect(lines.find((l) => l.id === real)?.hostname).toBe(hostname);
    // The page, then the hostnames of its 5,000 servers (and the actors' names): not one read per 90.
    expect(reads.trips).toBeLessThanOrEqual(3);
  });
});

describe("retention of a big day", () => {
  it("walks the date index: nothing due reads a few rows, and a day past a tick's bound goes over the next ticks", async () => {
    const short = { ...env, AUDIT_RETENTION_DAYS: "1" };
    const day = T0 + 40 * DAY_MS;
    // The chain cut up to the day before `day` (retention ends what earlier tests left).
    for (let i = 0; i < 20 && (await archiveAudit(short, day + 3_600_000)).cut.length; i++);
    // One day of more rows than a tick prunes (10 batches of 5000).
    const bulk = 52_000;
    await env.DB.prepare(
      `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ${bulk - 1})
       INSERT INTO audit_log (at, actor, action, target, details)
       SELECT ?1 + i, 'token:bootstrap', 'bulk.row', 'fleet:audit-x', NULL FROM n`,
    )
      .bind(day + 3_600_000)
      .run();
    const count = async () =>
      (await env.DB.prepare("SELECT count(*) AS n FROM audit_log WHERE action = 'bulk.row'").first<{ n: number }>())!.n;
    const db = getDb(env.DB);
    const maxId = (await env.DB.prepare("SELECT max(id) AS id FROM audit_log").first<{ id: number }>())!.id;
    // Nothing that old: the prune stops at the index's first entry instead of walking the table by id.
    const idle = await d1Rows(() => pruneAudit(db, { exportedUpTo: maxId, before: 1, limit: 5000 }));
    expect(idle.read).toBeLessThan(10);
    // Two days later the day is cut and past the retention: a tick prunes its bound ...
    const now = day + 2 * DAY_MS + 3_600_000;
    const first = await archiveAudit(short, now);
    expect(first.cut).toEqual([name(day), name(day + DAY_MS)]);
    expect(first.pruned).toBe(50_000);
    // ... and the next ticks, which cut nothing, the rest.
    const second = await archiveAudit(short, now + 60_000);
    expect(second).toMatchObject({ cut: [], pruned: bulk - 50_000 });
    expect(await count()).toBe(0);
    // Then nothing is due: the tick reads a few rows and writes none.
    const quiet = await d1Rows(async () =>
      expect(await archiveAudit(short, now + 120_000)).toEqual({ cut: [], pruned: 0 }),
    );
    expect(quiet.written).toBe(0);
    expect(quiet.read).toBeLessThan(10);
  });
});

describe("audit.recorded webhooks", () => {
  it("hands each fleet one event a tick with its new rows, once, and writes nothing when there are none", async () => {
    const { id: fleet } = await createFleet();
    const { id: other } = await createFleet();
    const url = await hook(fleet, "siem", ["audit.recorded"]);
    const otherUrl = await hook(other, "siem-b", ["audit.recorded"]);
    const sent = await receiver(fleet);
    const sentB = await receiver(other);
    const now = Date.now();
    // The first tick starts the cursor at the present; history stays in the export.
    await sendAuditEvents(env, now);
    const start = await env.DB.prepare("SELECT at FROM cron_cursors WHERE name = ?")
      .bind(AUDIT_EVENTS_CURSOR)
      .first<{ at: number }>();
    for (const s of [60, 120, 180])
      expect((await call("PATCH", `/v1/fleets/${fleet}`, { body: { stale_after_s: s } })).status).toBe(200);
    await rows([now], `fleet:${other}`, "siem.other");
    await rows([now], "image:deployment-wide", "siem.none");
    const r = await sendAuditEvents(env, now);
    expect(r.events).toBe(2);
    // A repeated tick (the cursor rolled back, as after a crash before its write) is dropped.
    await env.DB.prepare("UPDATE cron_cursors SET at = ? WHERE name = ?").bind(start!.at, AUDIT_EVENTS_CURSOR).run();
    await sendAuditEvents(env, now);
    await fireTimersNow(coordinator(fleet));
    await fireTimersNow(coordinator(other));
    expect(receivedBy(sent, url)).toEqual(["audit.recorded"]);
    const [body] = bodiesOf(sent, url);
    expect(body.data.entries.map((e: { action: string }) => e.action)).toEqual([
      "fleet.patch",
      "fleet.patch",
      "fleet.patch",
    ]);
    expect(bodiesOf(sentB, otherUrl)[0].data.entries.map((e: { action: string }) => e.action)).toEqual(["siem.other"]);
    // Nothing new: no event, no cursor write.
    const before = await env.DB.prepare("SELECT at FROM cron_cursors WHERE name = ?")
      .bind(AUDIT_EVENTS_CURSOR)
      .first<{ at: number }>();
    expect(await sendAuditEvents(env, now)).toMatchObject({ rows: 0, events: 0 });
    expect(
      (await env.DB.prepare("SELECT at FROM cron_cursors WHERE name = ?")
        .bind(AUDIT_EVENTS_CURSOR)
        .first<{ at: number }>())!.at,
    ).toBe(before!.at);
  });

  it("hands on the same rows under the same id after a crash between sending and moving the cursor", async () => {
    const { id: fleet } = await createFleet();
    const url = await hook(fleet, "siem", ["audit.recorded"]);
    const sent = await receiver(fleet);
    const now = Date.now();
    // Whatever earlier tests left is handed on first, so this test's batch is its own rows.
    await sendAuditEvents(env, now);
    await sendAuditEvents(env, now);
    const first = await rows([now, now], `fleet:${fleet}`, "crash.before");
    // The cursor's move fails after the events left, as a crash there would leave it.
    await env.DB.prepare(
      `CREATE TRIGGER no_cursor_move BEFORE UPDATE ON cron_cursors WHEN OLD.name = '${AUDIT_EVENTS_CURSOR}'
       BEGIN SELECT RAISE(ABORT, 'cut off'); END`,
    ).run();
    try {
      await expect(sendAuditEvents(env, now)).rejects.toThrow(/cut off/);
    } finally {
      await env.DB.prepare("DROP TRIGGER no_cursor_move").run();
    }
    // More rows arrive before the next tick: they are the next batch's, not mixed into this one.
    const later = await rows([now], `fleet:${fleet}`, "crash.after");
    expect(await sendAuditEvents(env, now)).toMatchObject({ rows: 2 });
    expect(await sendAuditEvents(env, now)).toMatchObject({ rows: 1 });
    expect(await sendAuditEvents(env, now)).toMatchObject({ rows: 0, events: 0 });
    await fireTimersNow(coordinator(fleet));
    // The fleet's own creation rows went out in the catch-up ticks; this test's rows follow.
    const bodies = bodiesOf(sent, url).filter((b) => b.data.entries[0].action.startsWith("crash."));
    expect(bodies.map((b) => b.data.entries.map((e: { id: number }) => e.id))).toEqual([first, later]);
    expect(new Set(bodies.map((b) => b.id)).size).toBe(2);
  });
});
