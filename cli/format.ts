/**
 * Durations and times as operators type and read them: `--timeout 20s`, `5m`, `1h30m` (a bare
 * number is seconds), and "3m ago" in tables unless --absolute-times asks for the timestamp.
 */
import { InvalidArgumentError } from "commander";

const UNIT_S: Record<string, number> = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400 };

/** Seconds in a duration: `90`, `90s`, `1.5m`, `1h30m`, `250ms`. */
export function parseDuration(text: string): number {
  const v = text.trim();
  if (/^\d+(\.\d+)?$/.test(v)) return Number(v);
  const parts = [...v.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h|d)/g)];
  if (!parts.length || parts.map((p) => p[0]).join("") !== v) {
    throw new InvalidArgumentError("expected a duration: 30, 30s, 5m, 1h30m, 250ms");
  }
  return parts.reduce((sum, p) => sum + Number(p[1]) * UNIT_S[p[2]], 0);
}

/** A commander parser for durations (seconds), optionally whole seconds only. */
export const duration =
  (opts: { whole?: boolean; min?: number } = {}) =>
  (text: string): number => {
    const s = parseDuration(text);
    if (opts.whole && !Number.isInteger(s)) throw new InvalidArgumentError("expected whole seconds (e.g. 90, 90s, 5m)");
    if (s < (opts.min ?? 0)) throw new InvalidArgumentError(`expected at least ${opts.min ?? 0} s`);
    return s;
  };

/** "3m ago" / "in 20s" for a timestamp, relative to `now`. */
export function ago(iso: string, now = Date.now()): string {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return iso;
  const d = Math.round((now - t) / 1000);
  const span = humanSpan(Math.abs(d));
  if (Math.abs(d) < 2) return "just now";
  return d >= 0 ? `${span} ago` : `in ${span}`;
}

/** 45s, 3m, 2h10m, 4d3h: the two largest units. */
export function humanSpan(seconds: number): string {
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${s % 60 && s < 600 ? `${s % 60}s` : ""}`;
  if (s < 86400)
    return `${Math.floor(s / 3600)}h${Math.floor((s % 3600) / 60) ? `${Math.floor((s % 3600) / 60)}m` : ""}`;
  return `${Math.floor(s / 86400)}d${Math.floor((s % 86400) / 3600) ? `${Math.floor((s % 86400) / 3600)}h` : ""}`;
}

/**
 * Text a host or another operator controls (error messages, hostnames, labels, reasons, URLs),
 * made safe to print to a terminal: every control character (C0, DEL, C1) and the Unicode
 * line/paragraph separators and bidi overrides become visible escapes (`\x1b`, `\u202e`), so a
 * host's report cannot clear the screen, recolour it, set the terminal's title or fake a table
 * line. Printable text, tabs excepted, is unchanged. Every table and field of hm goes through it
 * (Output.table, Output.fields); colours hm adds itself are applied after.
 */
export function visible(text: string): string {
  // eslint-disable-next-line no-control-regex
  return text.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g, (ch) => {
    const code = ch.charCodeAt(0);
    return code <= 0xff ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u${code.toString(16).padStart(4, "0")}`;
  });
}

/** Why something waits (its blocked_by), one line: every reason, the one to clear first first. */
export function blockedText(list: readonly { message: string }[] | undefined): string | null {
  return list && list.length ? list.map((b) => b.message).join("; ") : null;
}
