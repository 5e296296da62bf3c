/**
 * One line per event. Under systemd (stderr not a TTY) each line starts with the sd-daemon level
 * prefix (`<3>` error, `<4>` warning, `<6>` info, `<7>` debug) that journald turns into the
 * entry's priority, and carries no timestamp (journald adds its own); on a terminal, a time and the
 * level's word instead. Fields follow the message as `key=value` (quoted when they hold spaces).
 */
export type Level = "debug" | "info" | "warn" | "error";

const PRIORITY: Record<Level, number> = { error: 3, warn: 4, info: 6, debug: 7 };
const ORDER: Record<Level, number> = { debug: 0, info: 1, warn: 2, error: 3 };

export type Fields = Record<string, string | number | boolean | null | undefined>;

export interface Logger {
  debug(msg: string, fields?: Fields): void;
  info(msg: string, fields?: Fields): void;
  warn(msg: string, fields?: Fields): void;
  error(msg: string, fields?: Fields): void;
}

const value = (v: string | number | boolean | null) => {
  const s = String(v);
  return /[\s"=]/.test(s) || s === "" ? JSON.stringify(s) : s;
};

/** A line as the logger writes it (exported for the tests). */
export function formatLine(level: Level, msg: string, fields: Fields = {}, tty = false, now = new Date()): string {
  const kv = Object.entries(fields)
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => `${k}=${value(v as string | number | boolean | null)}`)
    .join(" ");
  // One event, one line: a message with newlines (a hook's output) is folded.
  const text = `${msg}${kv ? ` ${kv}` : ""}`.replace(/\r?\n/g, " | ");
  return tty ? `${now.toISOString()} ${level.padEnd(5)} ${text}` : `<${PRIORITY[level]}>${text}`;
}

export function createLogger(opts: { level?: Level; write?: (line: string) => void; tty?: boolean } = {}): Logger {
  const min = ORDER[opts.level ?? "info"];
  const tty = opts.tty ?? !!process.stderr.isTTY;
  const write = opts.write ?? ((line: string) => process.stderr.write(`${line}\n`));
  const at = (level: Level) => (msg: string, fields?: Fields) => {
    if (ORDER[level] >= min) write(formatLine(level, msg, fields, tty));
  };
  return { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
}
