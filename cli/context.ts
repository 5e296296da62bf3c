import { Option, type Command } from "commander";
import { Api, ApiError } from "./api.ts";
import { defaultFleet, resolveConnection, UsageError, type Connection } from "./config.ts";
import type { FetchLike } from "../agent/http.ts";
import { Exit, Output, readLine, type Format, type Io } from "./io.ts";

export interface Globals {
  url?: string;
  token?: string;
  context?: string;
  json?: boolean;
  output?: Format;
  /** false with --no-headers */
  headers?: boolean;
  absoluteTimes?: boolean;
  yes?: boolean;
  color?: boolean;
}

export type Action = (ctx: Ctx, ...args: any[]) => Promise<void>;

/**
 * Wraps an action so it gets its context (the command it belongs to decides the globals). Here,
 * below the commands, so that main.ts imports the commands and no command imports main.ts.
 */
export function act(io: Io, fn: Action) {
  return async function (this: Command, ...args: unknown[]) {
    const ctx = new Ctx(io, this);
    if (ctx.format === "csv" && !writesCsv.has(this))
      throw new Exit(2, "-o csv: only hm history writes CSV; use -o json or -o yaml here");
    try {
      await fn(ctx, ...args);
    } catch (err) {
      // A refused token: say which deployment refused it and where the token came from, so a
      // stale HM_TOKEN or a context pointing elsewhere is found at once.
      if (err instanceof ApiError && (err.status === 401 || err.status === 403) && ctx.resolved) {
        const details = err.details === undefined ? "" : `\n${JSON.stringify(err.details)}`;
        throw new Exit(1, `${err.code}: ${err.message}${details}\n${refusedBy(ctx.resolved)}`);
      }
      throw err;
    }
  };
}

/** The commands that write CSV for -o csv (csvCommand). */
const writesCsv = new WeakSet<Command>();

/** Marks a command as one that writes -o csv. */
export function csvCommand(cmd: Command): Command {
  writesCsv.add(cmd);
  return cmd;
}

/** "refused by URL (the URL from …); token from …": for 401 and 403 answers. */
export function refusedBy(conn: Connection): string {
  return `  refused by ${conn.url} (URL from ${conn.urlFrom}); token from ${conn.tokenFrom}`;
}

/** The --fleet options that fall back to HM_FLEET or the context's fleet (fleetOption). */
const defaulted = new WeakSet<Option>();

/**
 * `--fleet <fleet>` for a command that needs one (`.addOption(fleetOption())`): when not given,
 * HM_FLEET or the context's fleet (`hm context set-fleet`, `hm login --fleet`) stands in;
 * without either it is a usage error that says how to set one. Applied by fillFleet, the
 * program's preAction hook.
 */
export function fleetOption(description = "the fleet"): Option {
  const o = new Option(
    "--fleet <fleet>",
    `${description} (default: HM_FLEET, else the context's: hm context set-fleet)`,
  );
  defaulted.add(o);
  return o;
}

/** The program's preAction hook: fills --fleet for the commands fleetOption marked. */
export function fillFleet(io: Io) {
  return (_program: Command, cmd: Command) => {
    if (!cmd.options.some((o) => defaulted.has(o)) || cmd.getOptionValue("fleet") !== undefined) return;
    const g = cmd.optsWithGlobals() as Globals;
    let root: Command = cmd;
    while (root.parent) root = root.parent;
    const env = Object.fromEntries(Object.entries(io.env).filter(([, v]) => v !== ""));
    let found: ReturnType<typeof defaultFleet>;
    try {
      found = defaultFleet({ context: root.getOptionValueSource("context") === "env" ? undefined : g.context }, env);
    } catch (err) {
      if (err instanceof UsageError) throw new Exit(2, err.message);
      throw err;
    }
    if (!found)
      throw new Exit(
        2,
        "which fleet? pass --fleet NAME, set HM_FLEET, or keep one in the context: hm context set-fleet NAME",
      );
    cmd.setOptionValueWithSource("fleet", found.fleet, "config");
  };
}

/** What every command gets: the connection (resolved on first use), output, and the prompt. */
export class Ctx {
  readonly io: Io;
  private readonly cmd: Command;
  private conn?: Connection;
  private client?: Api;

  constructor(io: Io, cmd: Command) {
    this.io = io;
    this.cmd = cmd;
  }

  get globals(): Globals {
    return this.cmd.optsWithGlobals() as Globals;
  }

  /** -o (or --json, which is -o json). */
  get format(): Format {
    const g = this.globals;
    return g.json ? "json" : (g.output ?? "table");
  }

  /** Whether the output is the API's objects (json, yaml) or their names, rather than tables. */
  get machine(): boolean {
    return this.format === "json" || this.format === "yaml" || this.format === "name";
  }

  get out(): Output {
    const g = this.globals;
    return new Output(this.io, {
      format: this.format,
      color: g.color !== false,
      noHeaders: g.headers === false,
      absoluteTimes: !!g.absoluteTimes,
    });
  }

  /** The connection if a command has resolved it (for messages about it), else undefined. */
  get resolved(): Connection | undefined {
    return this.conn;
  }

  get connection(): Connection {
    if (!this.conn) {
      try {
        // Values commander took from HM_URL / HM_TOKEN / HM_CONTEXT are left to resolveConnection,
        // which reads the environment itself and can then say where a URL came from.
        let root: Command = this.cmd;
        while (root.parent) root = root.parent;
        const given = (k: "url" | "token" | "context") =>
          root.getOptionValueSource(k) === "env" ? undefined : this.globals[k];
        this.conn = resolveConnection(
          { url: given("url"), token: given("token"), context: given("context") },
          this.io.env,
          this.io.cwd,
        );
      } catch (err) {
        if (err instanceof UsageError) throw new Exit(2, err.message);
        throw err;
      }
    }
    return this.conn;
  }

  get api(): Api {
    const conn = this.connection;
    this.client ??= new Api(conn.url, conn.token, reachable(conn, this.io.fetch));
    return this.client;
  }

  /**
   * Destructive commands ask first, unless --yes. The answer is read from stdin (so `echo y |`
   * works); anything but y/yes, or no input at all, declines.
   */
  async confirm(question: string): Promise<void> {
    if (this.globals.yes) return;
    this.io.stderr(`${question} [y/N] `);
    const answer = await readLine(this.io.stdin);
    if (answer === null) this.io.stderr("\n");
    if (!answer || !/^y(es)?$/i.test(answer.trim()))
      throw new Exit(1, "not confirmed; nothing changed (pass --yes to skip the question)");
  }
}

/**
 * A fetch whose failure to reach the server says which URL, why, where the URL came from and
 * what to try (Node's own message is only "fetch failed").
 */
function reachable(conn: Connection, inner: FetchLike = (i, init) => fetch(i, init)): FetchLike {
  return async (input, init) => {
    try {
      return await inner(input, init);
    } catch (err) {
      if (init?.signal?.aborted || !(err instanceof TypeError)) throw err;
      const cause = (err as { cause?: { code?: string; message?: string } }).cause;
      const why = cause?.code ?? cause?.message ?? err.message;
      throw new Exit(
        1,
        `cannot reach ${conn.url} (${why}). The URL comes from ${conn.urlFrom}: is the server running there? ` +
          "Set another with --url, HM_URL or 'hm context use NAME'.",
      );
    }
  };
}
