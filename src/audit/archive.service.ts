/**
 * The cron's half of the audit trail out: cuts each UTC day that is over into an immutable R2
 * object (./archive.ts describes the file and its chain), then prunes D1 rows past the retention
 * that a day file already holds.
 *
 * The files live in the IMAGES bucket under `audit/`: one bucket to create and bind at deploy, and
 * no key of the image catalog or the agent builds starts with that prefix.
 *
 * Two runs at once (a slow tick overlapping the next) write a day at most once: the put is
 * conditional on the key being free, and the run that loses adopts the winner's file.
 *
 * Retention runs every tick (a probe of the date index when nothing is due), at most
 * PRUNE_BATCHES × PRUNE_BATCH rows a tick, so a big backlog goes over a few ticks.
 *
 * Crash safety: R2 is the truth about which days are cut; D1's `cron_cursors` row `audit_day` (the
 * start of the last day cut) only saves a listing. A run killed after writing a day's object but
 * before moving the cursor finds that object next minute and adopts it as it is (never rewritten:
 * a late row may have arrived since, and a second cut would differ from the first). A run killed
 * before writing it cuts the day again from D1, which still holds every row (nothing is pruned
 * past the last object's last id).
 */
import { eq, sql } from "drizzle-orm";
import { getDb } from "../db/client";
import { cronCursors } from "../db/schema";
import type { Env } from "../env";
import { logLine } from "../lib/log";
import {
  AUDIT_PREFIX,
  DAY_MS,
  FILE_FORMAT,
  cutDue,
  dayFile,
  dayKey,
  dayName,
  dayOfKey,
  dayStart,
  fileSha256,
  metaOf,
  metaRecord,
  type AuditLine,
  type DayMeta,
} from "./archive";
import { auditLines } from "./service";
import { cutPoint, pruneAudit, pruneDue } from "./store";

export const AUDIT_DAY_CURSOR = "audit_day";
/** Days cut per cron tick: a deployment catching up on a long history does it over a few minutes. */
const DAYS_PER_TICK = 7;
const READ_PAGE = 1000;
const PRUNE_BATCH = 5000;
const PRUNE_BATCHES = 10;
const DEFAULT_RETENTION_DAYS = 90;

const bucket = (env: Env) => env.IMAGES;

/** The deployment's retention of D1 audit rows, in days (AUDIT_RETENTION_DAYS; 90 when unset or not a whole number ≥ 1). */
function retentionDays(env: Env): number {
  const raw = env.AUDIT_RETENTION_DAYS;
  const n = raw && /^\d{1,6}$/.test(raw.trim()) ? Number(raw.trim()) : NaN;
  return Number.isInteger(n) && n >= 1 ? n : DEFAULT_RETENTION_DAYS;
}

export async function archiveAudit(env: Env, now: number): Promise<{ cut: string[]; pruned: number }> {
  const db = getDb(env.DB);
  const [cursor] = await db.select().from(cronCursors).where(eq(cronCursors.name, AUDIT_DAY_CURSOR));
  let prev: DayMeta | null = null;
  let day: number;
  if (cursor) {
    const head = await bucket(env).head(dayKey(cursor.at));
    prev = metaOf(head?.customMetadata);
    if (!prev) {
      // Never papered over: a chain with a hole must show in `hm audit verify`, not be re-cut.
      logLine("error", "audit day file missing or unreadable: days after it are not cut", { day: dayName(cursor.at) });
      return { cut: [], pruned: 0 };
    }
    day = cursor.at + DAY_MS;
  } else {
    const { firstAt } = await cutPoint(db, now);
    if (firstAt === null) return { cut: [], pruned: 0 };
    day = dayStart(firstAt);
  }
  const cut: string[] = [];
  while (cutDue(day, now) && cut.length < DAYS_PER_TICK) {
    const key = dayKey(day);
    const head = await bucket(env).head(key);
    const found = head ? metaOf(head.customMetadata) : null;
    if (head && !found) {
      logLine("error", "audit day file without its metadata: left as it is, days after it are not cut", { key });
      break;
    }
    prev = found ?? (await cutDay(env, day, prev));
    cut.push(dayName(day));
    day += DAY_MS;
  }
  if (cut.length) {
    // One write for the tick's days, moved only from where this run found it (a concurrent run
    // that moved it first wins); a crash before it leaves files the next run adopts as they are.
    const last = day - DAY_MS;
    await db
      .insert(cronCursors)
      .values({ name: AUDIT_DAY_CURSOR, at: last })
      .onConflictDoUpdate({
        target: cronCursors.name,
        set: { at: last },
        where: cursor ? sql`${cronCursors.at} = ${cursor.at}` : sql`0`,
      });
  }
  // Every tick, not only after a cut: a day of more rows than one tick deletes catches up over the
  // next ticks. Nothing due costs one probe of the date index.
  const pruned = prev ? await prune(env, prev.last_id, now) : 0;
  return { cut, pruned };
}

async function cutDay(env: Env, day: number, prev: DayMeta | null): Promise<DayMeta> {
  const after = prev?.last_id ?? 0;
  const { lastId } = await cutPoint(getDb(env.DB), day + DAY_MS);
  const upTo = Math.max(after, lastId ?? 0);
  const lines: AuditLine[] = [];
  for (let from = after; ;) {
    const page = await auditLines(env, { after: from, upTo, limit: READ_PAGE });
    lines.push(...page);
    if (page.length < READ_PAGE) break;
    from = page[page.length - 1].id;
  }
  const text = dayFile(
    {
      audit_day: dayName(day),
      format: FILE_FORMAT,
      prev_sha256: prev?.sha256 ?? null,
      after_id: after,
      last_id: upTo,
      rows: lines.length,
    },
    lines,
  );
  const meta: DayMeta = {
    sha256: await fileSha256(text),
    prev_sha256: prev?.sha256 ?? null,
    after_id: after,
    last_id: upTo,
    rows: lines.length,
  };
  // Only if no object has the key yet: two overlapping cron runs (a tick running past the next)
  // can both find the day uncut; the second to write adopts the first's file instead of replacing
  // it, since a late row may make its cut differ, and a day file is never rewritten.
  const put = await bucket(env).put(dayKey(day), text, {
    onlyIf: { etagDoesNotMatch: "*" },
    httpMetadata: { contentType: "application/x-ndjson" },
    customMetadata: metaRecord(meta),
  });
  if (put) return meta;
  const kept = metaOf((await bucket(env).head(dayKey(day)))?.customMetadata);
  if (!kept) throw new Error(`audit day file ${dayKey(day)} was written by another run without its metadata`);
  logLine("info", "audit day cut by an overlapping run: its file is adopted", { day: dayName(day) });
  return kept;
}

/** Deletes rows past the retention that the day files hold already; bounded per tick, the rest next tick. */
async function prune(env: Env, exportedUpTo: number, now: number): Promise<number> {
  const before = now - retentionDays(env) * DAY_MS;
  const db = getDb(env.DB);
  // A read, so a tick with nothing due writes nothing.
  if (!(await pruneDue(db, { exportedUpTo, before }))) return 0;
  let total = 0;
  for (let i = 0; i < PRUNE_BATCHES; i++) {
    const n = await pruneAudit(db, { exportedUpTo, before, limit: PRUNE_BATCH });
    total += n;
    if (n < PRUNE_BATCH) break;
  }
  return total;
}

/** The day files in R2, oldest first, with what their metadata says. */
export async function listDays(env: Env, opts: { from?: number; limit: number }) {
  const items: ({ day: string } & DayMeta)[] = [];
  let cursor: string | undefined;
  const startAfter = opts.from !== undefined ? dayKey(opts.from - DAY_MS) : undefined;
  do {
    const page = await bucket(env).list({
      prefix: AUDIT_PREFIX,
      startAfter: cursor ? undefined : startAfter,
      cursor,
      include: ["customMetadata"],
      limit: 1000,
    });
    for (const o of page.objects) {
      const start = dayOfKey(o.key);
      const meta = metaOf(o.customMetadata);
      if (start === null || !meta) continue;
      items.push({ day: dayName(start), ...meta });
      if (items.length >= opts.limit) return { items, next_from: dayName(start + DAY_MS) };
    }
    cursor = page.truncated ? page.cursor : undefined;
  } while (cursor);
  return { items, next_from: null };
}

export async function readDay(env: Env, start: number) {
  return bucket(env).get(dayKey(start));
}
