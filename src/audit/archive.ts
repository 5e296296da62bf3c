/**
 * The audit log's day files (pure): one NDJSON object per UTC day, `audit/YYYY-MM-DD.ndjson`. Its
 * first line is a header naming the day, the id range it holds and the sha256 of the previous
 * day's file, so the files form a chain: a day altered or missing breaks the next day's link.
 *
 * A day's file holds the rows RECORDED by the end of that day, by id: every row with an id above
 * the previous file's last id, up to the highest id of a row dated before the day's end. Ids only
 * grow, so the files together hold every row exactly once and in the order of the export; a row an
 * object's outbox delivered after its day was cut (dated earlier) lands in the next file cut.
 */

// No imports: hm (Node, running the .ts sources as they are) loads this file for `hm audit verify`.

/** sha256 (hex) of a file's text: its link in the chain. */
export async function fileSha256(text: string): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)));
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}

export const DAY_MS = 86_400_000;
export const AUDIT_PREFIX = "audit/";
/** A day is cut this long after it ends: room for objects' outboxes to deliver its last rows. */
const CUT_GRACE_MS = 15 * 60_000;
export const FILE_FORMAT = 1;

export const dayStart = (ms: number) => Math.floor(ms / DAY_MS) * DAY_MS;
export const dayName = (start: number) => new Date(start).toISOString().slice(0, 10);
export const dayKey = (start: number) => `${AUDIT_PREFIX}${dayName(start)}.ndjson`;

const DAY_RE = /^\d{4}-\d{2}-\d{2}$/;
/** The start (ms) of a day named YYYY-MM-DD, or null for anything else (2026-02-30 included). */
export function parseDay(name: string): number | null {
  if (!DAY_RE.test(name)) return null;
  const ms = Date.parse(`${name}T00:00:00.000Z`);
  return Number.isFinite(ms) && dayName(ms) === name ? ms : null;
}

export const dayOfKey = (key: string) =>
  key.startsWith(AUDIT_PREFIX) && key.endsWith(".ndjson") ? parseDay(key.slice(AUDIT_PREFIX.length, -7)) : null;

/** Whether the day starting at `start` is over, with its grace, at `now`. */
export const cutDue = (start: number, now: number) => start + DAY_MS + CUT_GRACE_MS <= now;

export interface DayHeader {
  audit_day: string;
  format: number;
  /** sha256 (hex) of the previous day's whole file; null for the first day of the chain. */
  prev_sha256: string | null;
  /** Rows hold ids in (after_id, last_id]. */
  after_id: number;
  last_id: number;
  rows: number;
}

/** One export line per audit row: the same lines the export route streams. */
export interface AuditLine {
  id: number;
  at: string;
  actor: string;
  actor_name: string | null;
  action: string;
  target: string;
  hostname: string | null;
  details: unknown;
}

export function dayFile(header: DayHeader, lines: readonly AuditLine[]): string {
  return [header, ...lines].map((l) => JSON.stringify(l) + "\n").join("");
}

/** R2 custom metadata of a day file: what the next cut and the day list need without a download. */
export interface DayMeta {
  sha256: string;
  prev_sha256: string | null;
  after_id: number;
  last_id: number;
  rows: number;
}

export function metaOf(m: Record<string, string> | undefined): DayMeta | null {
  if (!m?.sha256 || m.last_id === undefined) return null;
  const num = (v: string | undefined) => (v !== undefined && /^\d{1,15}$/.test(v) ? Number(v) : null);
  const after = num(m.after_id);
  const last = num(m.last_id);
  const rows = num(m.rows);
  if (after === null || last === null || rows === null) return null;
  return { sha256: m.sha256, prev_sha256: m.prev_sha256 || null, after_id: after, last_id: last, rows };
}

export const metaRecord = (m: DayMeta): Record<string, string> => ({
  sha256: m.sha256,
  prev_sha256: m.prev_sha256 ?? "",
  after_id: String(m.after_id),
  last_id: String(m.last_id),
  rows: String(m.rows),
});

/**
 * Checks one day's file against the chain: its own header (day, counts, ids in order inside its
 * range) and its link to the previous file (`prev`: that file's digest and last id; null at the
 * start of a check, whose first link is taken as given). Returns the problem, or null.
 */
function checkDay(
  day: string,
  text: string,
  prev: { day: string; sha256: string; last_id: number } | null,
): string | null {
  const lines = text.split("\n");
  if (lines.at(-1) !== "") return "the file does not end with a newline (truncated?)";
  lines.pop();
  let header: DayHeader;
  let rows: { id?: unknown }[];
  try {
    header = JSON.parse(lines[0] ?? "");
    rows = lines.slice(1).map((l) => JSON.parse(l));
  } catch {
    return "a line is not JSON";
  }
  if (header?.audit_day !== day) return `the header names day ${String(header?.audit_day)}`;
  if (header.rows !== rows.length) return `the header counts ${header.rows} rows, the file holds ${rows.length}`;
  let last = header.after_id;
  for (const r of rows) {
    if (typeof r.id !== "number" || r.id <= last || r.id > header.last_id) return `row ${String(r.id)} is out of order`;
    last = r.id;
  }
  if (prev) {
    if (parseDay(day)! - parseDay(prev.day)! !== DAY_MS)
      return `day ${dayName(parseDay(prev.day)! + DAY_MS)} is missing`;
    if (header.prev_sha256 !== prev.sha256)
      return `its link to ${prev.day} does not match: ${prev.day} was altered, or this one`;
    if (header.after_id !== prev.last_id) return `its rows do not follow ${prev.day}'s (ids after ${header.after_id})`;
  }
  return null;
}

export interface DownloadedDay {
  day: string;
  text: string;
}

/**
 * Walks downloaded days, oldest first, and returns the first broken one (a gap, an altered file, a
 * link that does not match) or null when the chain holds. `last` is the sha256 the deployment
 * recorded for the newest day (its R2 metadata): the newest file has no successor to vouch for it.
 */
export async function verifyChain(
  days: readonly DownloadedDay[],
  last?: { day: string; sha256: string },
): Promise<{ day: string; problem: string } | null> {
  let prev: { day: string; sha256: string; last_id: number } | null = null;
  for (const d of days) {
    const problem = checkDay(d.day, d.text, prev);
    if (problem) return { day: d.day, problem };
    const sha = await fileSha256(d.text);
    prev = {
      day: d.day,
      sha256: sha,
      last_id: (JSON.parse(d.text.slice(0, d.text.indexOf("\n"))) as DayHeader).last_id,
    };
  }
  if (prev && last && last.day === prev.day && last.sha256 !== prev.sha256)
    return { day: prev.day, problem: "its sha256 is not the one recorded when it was cut" };
  return null;
}
