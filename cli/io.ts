import Table from "cli-table3";
import { createColors } from "picocolors";
import { createInterface } from "node:readline";
import type { Readable } from "node:stream";
import type { FetchLike } from "../agent/http.ts";

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

export class Output {
  private readonly io: Io;
  readonly json: boolean;
  readonly c: ReturnType<typeof createColors>;

  constructor(io: Io, json: boolean, color: boolean) {
    this.io = io;
    this.json = json;
    this.c = createColors(color && io.interactive && !io.env.NO_COLOR);
  }

  line(s = "") {
    this.io.stdout(`${s}\n`);
  }

  note(s: string) {
    this.io.stderr(`${s}\n`);
  }

  /** --json: the data as the API returns it, pretty-printed; the stable interface for scripts. */
  data(value: unknown) {
    this.io.stdout(`${JSON.stringify(value, null, 2)}\n`);
  }

  table(head: string[], rows: (string | number | null | undefined)[][], empty = "(none)") {
    if (rows.length === 0) return this.line(this.c.dim(empty));
    const t = new Table({
      head: head.map((h) => this.c.bold(h)),
      style: { head: [], border: [], "padding-left": 0, "padding-right": 0 },
      chars: { top: "", "top-mid": "", "top-left": "", "top-right": "", bottom: "", "bottom-mid": "", "bottom-left": "", "bottom-right": "", left: "", "left-mid": "", mid: "", "mid-mid": "", right: "", "right-mid": "", middle: "  " },
    });
    for (const r of rows) t.push(r.map((v) => (v === null || v === undefined ? "-" : String(v))));
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
