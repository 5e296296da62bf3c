import Table from "cli-table3";
import { createColors } from "picocolors";
import { createInterface } from "node:readline";
import type { Readable } from "node:stream";
import { stringify as stringifyYaml } from "yaml";
import type { FetchLike } from "../agent/http.ts";
import { ago } from "./format.ts";

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

export const FORMATS = ["table", "wide", "json", "yaml"] as const;
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

export class Output {
  private readonly io: Io;
  readonly format: Format;
  /** json or yaml: the API's own objects, for scripts. */
  readonly json: boolean;
  readonly c: ReturnType<typeof createColors>;
  private readonly opts: OutputOptions;

  constructor(io: Io, opts: OutputOptions) {
    this.io = io;
    this.opts = opts;
    this.format = opts.format;
    this.json = opts.format === "json" || opts.format === "yaml";
    this.c = createColors(opts.color && io.interactive && !io.env.NO_COLOR);
  }

  line(s = "") {
    this.io.stdout(`${s}\n`);
  }

  note(s: string) {
    this.io.stderr(`${s}\n`);
  }

  /** -o json / yaml: the data as the API returns it; the stable interface for scripts. */
  data(value: unknown) {
    if (this.format === "yaml") this.io.stdout(stringifyYaml(value, { lineWidth: 0 }));
    else this.io.stdout(`${JSON.stringify(value, null, 2)}\n`);
  }

  /** A timestamp as operators read it: "3m ago" (or ISO 8601 with --absolute-times). */
  time(iso: string | null | undefined): string | null {
    if (!iso) return null;
    return this.opts.absoluteTimes ? iso : ago(iso);
  }

  table(head: Column[], rows: (string | number | boolean | null | undefined)[][], empty = "(none)") {
    if (rows.length === 0) {
      if (!this.opts.noHeaders) this.line(this.c.dim(empty));
      return;
    }
    // Wide-only columns show with -o wide; the others always.
    const keep = head.map((h) => typeof h === "string" || this.format === "wide");
    const names = head.map((h) => (typeof h === "string" ? h : h.head)).filter((_, i) => keep[i]);
    const t = new Table({
      ...(this.opts.noHeaders ? {} : { head: names.map((h) => this.c.bold(h)) }),
      style: { head: [], border: [], "padding-left": 0, "padding-right": 0 },
      chars: { top: "", "top-mid": "", "top-left": "", "top-right": "", bottom: "", "bottom-mid": "", "bottom-left": "", "bottom-right": "", left: "", "left-mid": "", mid: "", "mid-mid": "", right: "", "right-mid": "", middle: "  " },
    });
    for (const r of rows) t.push(r.filter((_, i) => keep[i]).map((v) => (v === null || v === undefined ? "-" : String(v))));
    this.line(t.toString().split("\n").map((l) => l.trimEnd()).join("\n"));
  }

  /** Key/value block for one object. */
  fields(rows: [string, unknown][]) {
    const width = Math.max(...rows.map(([k]) => k.length));
    for (const [k, v] of rows) this.line(`${this.c.dim(k.padEnd(width))}  ${v === null || v === undefined ? "-" : String(v)}`);
  }

  status(s: string) {
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
        return s;
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
