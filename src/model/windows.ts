/**
 * Weekly maintenance windows, evaluated on the wall clock of each window's IANA time zone — the
 * same rule Zincati's periodic strategy follows: clock times are obeyed, so a DST shift lengthens
 * or shortens the window that spans it, and a window may run past midnight and past Sunday.
 * Their schema is here too: reboot groups (src/fleetlock/) and rollout strategies (./strategy.ts)
 * both take them.
 */
import { z } from "@hono/zod-openapi";

const DAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"] as const;
type Day = (typeof DAYS)[number];

export interface MaintenanceWindow {
  days: Day[];
  /** Local start, "HH:MM" (24 h). */
  start_time: string;
  length_minutes: number;
  time_zone: string;
}

const MINUTES_PER_DAY = 1440;
const MINUTES_PER_WEEK = 7 * MINUTES_PER_DAY;

// Formatters are costly to build and zone data never changes within an isolate's life.
const formatters = new Map<string, Intl.DateTimeFormat>();

function formatterFor(timeZone: string) {
  let f = formatters.get(timeZone);
  if (!f) {
    f = new Intl.DateTimeFormat("en-US", {
      timeZone,
      weekday: "short",
      hour: "2-digit",
      minute: "2-digit",
      hourCycle: "h23",
    });
    formatters.set(timeZone, f);
  }
  return f;
}

/** True when the runtime knows the zone; `Intl` throws RangeError for names it does not. */
function isValidTimeZone(timeZone: string): boolean {
  try {
    formatterFor(timeZone);
    return true;
  } catch {
    return false;
  }
}

/** Minutes since local Monday 00:00 in `timeZone` at instant `nowMs`. */
export function localMinuteOfWeek(nowMs: number, timeZone: string): number {
  const parts = formatterFor(timeZone).formatToParts(new Date(nowMs));
  let day = 0;
  let hour = 0;
  let minute = 0;
  for (const p of parts) {
    if (p.type === "weekday") day = DAYS.indexOf(p.value as Day);
    else if (p.type === "hour") hour = Number(p.value) % 24;
    else if (p.type === "minute") minute = Number(p.value);
  }
  return day * MINUTES_PER_DAY + hour * 60 + minute;
}

function parseStartTime(hhmm: string): number {
  const [h, m] = hhmm.split(":").map(Number);
  return h * 60 + m;
}

/** The local minutes of the week at which the window opens, one per day. */
const openingsOf = (w: MaintenanceWindow): number[] => {
  const start = parseStartTime(w.start_time);
  return w.days.map((d) => DAYS.indexOf(d) * MINUTES_PER_DAY + start);
};

/** Whether one window is open at `nowMs` (start inclusive, end exclusive). */
export function windowOpen(w: MaintenanceWindow, nowMs: number): boolean {
  const now = localMinuteOfWeek(nowMs, w.time_zone);
  // Modular distance handles windows that wrap past midnight or past Sunday into Monday.
  return openingsOf(w).some((opensAt) => (now - opensAt + MINUTES_PER_WEEK) % MINUTES_PER_WEEK < w.length_minutes);
}

/** No windows means no restriction; otherwise grants happen only inside one of them. */
export function withinWindows(windows: readonly MaintenanceWindow[], nowMs: number): boolean {
  return windows.length === 0 || windows.some((w) => windowOpen(w, nowMs));
}

/** When the earliest of the windows opens after `nowMs` (ms, to the minute); null when one is open or there is none. */
export function nextOpening(windows: readonly MaintenanceWindow[], nowMs: number): number | null {
  if (withinWindows(windows, nowMs)) return null;
  let best = Infinity;
  for (const w of windows) {
    const now = localMinuteOfWeek(nowMs, w.time_zone);
    for (const opensAt of openingsOf(w))
      best = Math.min(best, (opensAt - now + MINUTES_PER_WEEK) % MINUTES_PER_WEEK || MINUTES_PER_WEEK);
  }
  if (best === Infinity) return null;
  // To the start of that minute; a DST shift may move it, and the caller looks again then.
  return Math.floor(nowMs / 60_000) * 60_000 + best * 60_000;
}

const FULL_DAY_NAMES: Record<string, Day> = {
  monday: "Mon",
  tuesday: "Tue",
  wednesday: "Wed",
  thursday: "Thu",
  friday: "Fri",
  saturday: "Sat",
  sunday: "Sun",
};

/** Days as Zincati's periodic strategy takes them: abbreviated or full English names. */
const day = z
  .string()
  .transform((d, ctx) => {
    const short = DAYS.find((x) => x.toLowerCase() === d.toLowerCase()) ?? FULL_DAY_NAMES[d.toLowerCase()];
    if (!short) {
      ctx.addIssue({ code: "custom", message: `'${d}' is not a weekday (Mon…Sun or Monday…Sunday)` });
      return z.NEVER;
    }
    return short;
  })
  .openapi({ type: "string", example: "Sat" });

/** A weekly window as operators write it (a reboot group's, a rollout strategy's). */
export const MaintenanceWindowSchema = z
  .strictObject({
    days: z.array(day).min(1).max(7),
    start_time: z.string().regex(/^([01]\d|2[0-3]):[0-5]\d$/, "start_time is HH:MM, 00:00 to 23:59"),
    length_minutes: z.number().int().min(1).max(MINUTES_PER_WEEK),
    time_zone: z
      .string()
      .max(64)
      .refine(isValidTimeZone, "time_zone must be an IANA time zone name, e.g. Europe/Berlin")
      .default("UTC"),
  })
  .openapi("MaintenanceWindow");
