import Table from "cli-table3";
import { createColors } from "picocolors";
import { createInterface } from "node:readline";
import type { Readable } from "node:stream";
import { stringify as stringifyYaml } from "yaml";
import type { FetchLike } from "../agent/http.ts";
import { ago, visible } from "./format.ts";

/** Everything hm touches outside itself, injectable so tests run it in-process. */
export interface Io {
  stdout: (s: string) => void;
  stderr: (s: string) => void;
  stdin: Readable;
  /** Whether a human is at the terminal (colours, prompts). */
  interactive: boolean;
  env: Record<string, string | undefined>;
  cwd: string;
  fetch?: FetchLike;
}

export function processIo(): Io {
  return {
    // A closed pipe (`hm … | head`) is handled once in run.ts: the command ends quietly.
    stdout: (s) => void process.stdout.write(s),
    stderr: (s) => void process.stderr.write(s),
    stdin: process.stdin,
    interactive: !!process.stdout.isTTY && !!process.stdin.isTTY,
    env: process.env,
    cwd: process.cwd(),
  };
}

/** A failure that ends hm with a given exit code (1 error, 2 usage, 3 wait timed out / check found something). */
export class Exit extends Error {
  readonly code: 0 | 1 | 2 | 3;

  constructor(code: 0 | 1 | 2 | 3, message: string) {
    super(message);
    this.code = code;
  }
}

/** `csv` only where a command says it writes CSV (hm history): act() refuses it elsewhere. */
export const FORMATS = ["table", "wide", "json", "yaml", "name", "csv"] as const;
export type Format = (typeof FORMATS)[number];

export interface OutputOptions {
  format: Format;
  color: boolean;
  /** Tables without their header row (for scripts that cut columns). */
  noHeaders?: boolean;
  /** Timestamps as ISO 8601 rather than "3m ago". */
  absoluteTimes?: boolean;
}

/** A table column: its header, and whether it shows only with `-o wide`. */
export type Column = string | { head: string; wide: true };

/**
 * Text hm styled itself (its colours): printed as it is. Every other string a table or a field
 * shows is passed through visible() first, so only hm's own escape codes reach the terminal.
 */
export class Styled {
  readonly text: string;
  constructor(text: string) {
    this.text = text;
  }
  toString() {
    return this.text;
  }
}

/** What a table cell or a field may hold. */
export type Cell = string | number | boolean | null | undefined | Styled;

type Colors = Omit<ReturnType<typeof createColors>, "isColorSupported">;
export type Palette = { [K in keyof Colors]: (text: string | number) => Styled };

/** picocolors, its results marked as hm's own styling. */
function palette(enabled: boolean): Palette {
  const raw = createColors(enabled) as unknown as Record<string, (t: string) => string>;
  const out: Record<string, (t: string | number) => Styled> = {};
  for (const [k, f] of Object.entries(raw)) if (typeof f === "function") out[k] = (t) => new Styled(f(String(t)));
  return out as Palette;
}

/** A cell as the terminal gets it: hm's styling kept, everything else with control characters visible. */
const cellText = (v: Cell | unknown): string =>
  v instanceof Styled ? v.text : v === null || v === undefined ? "-" : visible(String(v));

/** The name `-o name` prints for an object: its id, else its name (or agent, hostname, fleet). */
function nameOf(v: unknown): string | null {
  if (typeof v === "string") return v;
  if (!v || typeof v !== "object") return null;
  const o = v as Record<string, unknown>;
  for (const k of ["id", "name", "agent", "hostname", "fleet"])
    if (typeof o[k] === "string" && o[k]) return o[k] as string;
  // A wrapper (`{webhook, secret}`, `{released}`): the one object inside it that has a name.
  for (const inner of Object.values(o))
    if (inner && typeof inner === "object" && !Array.isArray(inner)) {
      const n = nameOf(inner);
      if (n) return n;
    }
  return null;
}

export class Output {
  private readonly io: Io;
  readonly format: Format;
  /** json, yaml or name: the API's own objects (or their names), for scripts. */
  readonly json: boolean;
  readonly c: Palette;
  private readonly opts: OutputOptions;

  constructor(io: Io, opts: OutputOptions) {
    this.io = io;
    this.opts = opts;
    this.format = opts.format;
    this.json = opts.format === "json" || opts.format === "yaml" || opts.format === "name";
    this.c = palette(opts.color && io.interactive && !io.env.NO_COLOR);
  }

  line(s: string | Styled = "") {
    this.io.stdout(`${s}\n`);
  }

  note(s: string | Styled) {
    this.io.stderr(`${s}\n`);
  }

  /**
   * -o json / yaml: the data as the API returns it; the stable interface for scripts. A list is
   * always a JSON array of the API's objects (never `{items}`), on every command. -o name: one
   * name a line (`name` picks it; else the object's id, name, agent or hostname).
   */
  data<T>(value: T, name?: (item: T extends (infer I)[] ? I : T) => string | null | undefined) {
    if (this.format === "name") {
      const items = (Array.isArray(value) ? value : [value]) as (T extends (infer I)[] ? I : T)[];
      for (const item of items) {
        const n = name ? name(item) : nameOf(item);
        if (n) this.line(visible(n));
      }
      return;
    }
    if (this.format === "yaml") this.io.stdout(stringifyYaml(value, { lineWidth: 0 }));
    else this.io.stdout(`${JSON.stringify(value, null, 2)}\n`);
  }

  /** A timestamp as operators read it: "3m ago" (or ISO 8601 with --absolute-times). */
  time(iso: string | null | undefined): string | null {
    if (!iso) return null;
    return this.opts.absoluteTimes ? iso : ago(iso);
  }

  /** Rows of cells; strings are shown with their control characters made visible (cellText). */
  table(head: Column[], rows: Cell[][], empty = "(none)") {
    if (rows.length === 0) {
      if (!this.opts.noHeaders) this.line(this.c.dim(empty));
      return;
    }
    // Wide-only columns show with -o wide; the others always.
    const keep = head.map((h) => typeof h === "string" || this.format === "wide");
    const names = head.map((h) => (typeof h === "string" ? h : h.head)).filter((_, i) => keep[i]);
    const t = new Table({
      ...(this.opts.noHeaders ? {} : { head: names.map((h) => this.c.bold(h).text) }),
      style: { head: [], border: [], "padding-left": 0, "padding-right": 0 },
      chars: {
        top: "",
        "top-mid": "",
        "top-left": "",
        "top-right": "",
        bottom: "",
        "bottom-mid": "",
        "bottom-left": "",
        "bottom-right": "",
        left: "",
        "left-mid": "",
        mid: "",
        "mid-mid": "",
        right: "",
        "right-mid": "",
        middle: "  ",
      },
    });
    for (const r of rows) t.push(r.filter((_, i) => keep[i]).map(cellText));
    this.line(
      t
        .toString()
        .split("\n")
        .map((l) => l.trimEnd())
        .join("\n"),
    );
  }

  /** Key/value block for one object; values are shown as table cells are (cellText). */
  fields(rows: [string, unknown][]) {
    const width = Math.max(...rows.map(([k]) => k.length));
    for (const [k, v] of rows) this.line(`${this.c.dim(k.padEnd(width))}  ${cellText(v)}`);
  }

  status(s: string): Styled {
    const c = this.c;
    switch (s) {
      case "realized":
        return c.green(s);
      case "failed":
      case "removal_failed":
        return c.red(s);
      case "stale":
      case "drifted":
        return c.yellow(s);
      default:
        return new Styled(visible(s));
    }
  }
}

/** Reads one line from stdin; null at end of input. */
export function readLine(stdin: Readable): Promise<string | null> {
  return new Promise((resolve) => {
    const rl = createInterface({ input: stdin, terminal: false });
    let done = false;
    rl.once("line", (l) => {
      done = true;
      rl.close();
      resolve(l);
    });
    rl.once("close", () => {
      if (!done) resolve(null);
    });
  });
}

export async function readAll(stdin: Readable): Promise<string> {
  let s = "";
  for await (const chunk of stdin) s += chunk;
  return s;
}

/**
 * Runs `body` until Ctrl-C or, with `forS`, until that many seconds have passed: the signal it is
 * given aborts then (`--follow`, `--watch`).
 */
export async function untilStopped(forS: number | undefined, body: (signal: AbortSignal) => Promise<void>) {
  const stop = new AbortController();
  const onSig = () => stop.abort();
  process.once("SIGINT", onSig);
  const timer = forS === undefined ? null : setTimeout(() => stop.abort(), forS * 1000);
  try {
    await body(stop.signal);
  } finally {
    if (timer) clearTimeout(timer);
    process.removeListener("SIGINT", onSig);
  }
}
