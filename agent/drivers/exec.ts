import { spawn } from "node:child_process";

export interface RunOptions {
  /** The process group is killed (SIGKILL) when the command has not exited by then. */
  timeoutMs: number;
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  /** Most stdout kept, bytes (a `ps` listing is read whole; a hook's chatter is not). */
  maxStdout?: number;
  /** Most of the combined output's tail kept, bytes (it becomes a report's error message). */
  maxTail?: number;
}

export interface RunResult {
  /** The exit code; null when killed by a signal (`signal` says which). */
  code: number | null;
  signal: NodeJS.Signals | null;
  timedOut: boolean;
  stdout: string;
  stderr: string;
  /** The last `maxTail` bytes of stdout and stderr as they came, interleaved. */
  tail: string;
}

const DEFAULT_MAX_STDOUT = 16 * 1024 * 1024;
const DEFAULT_MAX_TAIL = 3000;

/** Keeps the last `max` bytes of what is appended. */
class Tail {
  private chunks: Buffer[] = [];
  private size = 0;
  private readonly max: number;
  constructor(max: number) {
    this.max = max;
  }
  push(b: Buffer) {
    this.chunks.push(b);
    this.size += b.length;
    while (this.size - this.chunks[0].length >= this.max) this.size -= this.chunks.shift()!.length;
  }
  toString() {
    const all = Buffer.concat(this.chunks);
    return all.subarray(Math.max(0, all.length - this.max)).toString("utf8");
  }
}

/**
 * Runs a command in its own process group, without a shell. Resolves when the command itself
 * exits (a daemon it leaves behind, holding the pipes, does not keep the caller waiting) or when
 * the timeout kills its whole group; never rejects for the command's own failure (the caller reads
 * `code`), only when it cannot be started at all.
 */
export function run(cmd: string, args: string[], opts: RunOptions): Promise<RunResult> {
  const maxStdout = opts.maxStdout ?? DEFAULT_MAX_STDOUT;
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, {
      cwd: opts.cwd,
      env: opts.env ?? process.env,
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
    });
    const out: Buffer[] = [];
    let outSize = 0;
    const err = new Tail(64 * 1024);
    const tail = new Tail(opts.maxTail ?? DEFAULT_MAX_TAIL);
    let timedOut = false;
    child.stdout.on("data", (b: Buffer) => {
      if (outSize < maxStdout) out.push(b.subarray(0, maxStdout - outSize));
      outSize += b.length;
      tail.push(b);
    });
    child.stderr.on("data", (b: Buffer) => {
      err.push(b);
      tail.push(b);
    });
    const killGroup = () => {
      try {
        process.kill(-child.pid!, "SIGKILL");
      } catch {
        // Already gone.
      }
    };
    const timer = setTimeout(() => {
      timedOut = true;
      killGroup();
    }, opts.timeoutMs);
    child.on("error", (e) => {
      clearTimeout(timer);
      reject(Object.assign(new Error(`cannot run ${cmd}: ${e.message}`), { code: (e as NodeJS.ErrnoException).code }));
    });
    let ended = false;
    const finish = (code: number | null, signal: NodeJS.Signals | null) => {
      if (ended) return;
      ended = true;
      clearTimeout(timer);
      child.stdout.destroy();
      child.stderr.destroy();
      resolve({
        code,
        signal,
        timedOut,
        stdout: Buffer.concat(out).toString("utf8"),
        stderr: err.toString(),
        tail: tail.toString(),
      });
    };
    // Usually the pipes close as the command exits; when something it started keeps them open (a
    // daemon a start hook leaves running), what was written by then is read and the rest let go.
    child.on("close", (code, signal) => finish(code, signal));
    child.on("exit", (code, signal) => {
      clearTimeout(timer);
      setTimeout(() => finish(code, signal), 250).unref();
    });
  });
}

/**
 * A terminal's escape sequences (colours, cursor moves): a CSI (ESC [, or its 8-bit form U+009B,
 * which some terminals act on in UTF-8 too), its parameters, its final byte.
 */
const TERMINAL_ESCAPE = new RegExp(String.raw`(?:\u001b\[|\u009b)[0-?]*[ -/]*[@-~]`, "g");
/**
 * Control characters but the line break and the tab (carriage returns are line breaks by then),
 * the C1 ones (U+0080 to U+009F: 8-bit escapes, string starts) included.
 */
const CONTROL = new RegExp(String.raw`[\u0000-\u0008\u000b-\u001f\u007f-\u009f]`, "g");

/**
 * What a command (a hook, the engine, a container's log) printed, as text for an operator: it
 * becomes a report's error (stored, shown in the console and by hm) and a log line (read on a
 * terminal). Colours are dropped; NUL, bells, a lone escape and the like are shown as U+FFFD, as
 * bytes that are not UTF-8 already are: what a program prints never drives the reader's terminal.
 * A lone carriage return (a progress bar redrawing its line) is a line break: each state it drew
 * is kept as a line, where a terminal would have shown the last.
 */
export function printable(text: string): string {
  return text.replace(TERMINAL_ESCAPE, "").replace(/\r\n?/g, "\n").replace(CONTROL, "\ufffd");
}

/** One line of a command's outcome for an error message: how it ended and its output's tail. */
export function describeFailure(what: string, r: RunResult, timeoutMs: number): string {
  const how = r.timedOut
    ? `timed out after ${Math.round(timeoutMs / 1000)} s (killed)`
    : r.code !== null
      ? `exited with code ${r.code}`
      : `was killed by ${r.signal}`;
  const output = printable(r.tail).trim();
  return `${what} ${how}${output ? `: ${output}` : ""}`;
}
