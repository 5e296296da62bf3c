import type { Command } from "commander";
import { Api } from "./api.ts";
import { resolveConnection, UsageError, type Connection } from "./config.ts";
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
    await fn(new Ctx(io, this), ...args);
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

  /** Whether the output is the API's objects (json, yaml) rather than tables. */
  get machine(): boolean {
    return this.format === "json" || this.format === "yaml";
  }

  get out(): Output {
    const g = this.globals;
    return new Output(this.io, { format: this.format, color: g.color !== false, noHeaders: g.headers === false, absoluteTimes: !!g.absoluteTimes });
  }

  get connection(): Connection {
    if (!this.conn) {
      try {
        // Values commander took from HM_URL / HM_TOKEN / HM_CONTEXT are left to resolveConnection,
        // which reads the environment itself and can then say where a URL came from.
        let root: Command = this.cmd;
        while (root.parent) root = root.parent;
        const given = (k: "url" | "token" | "context") => (root.getOptionValueSource(k) === "env" ? undefined : this.globals[k]);
        this.conn = resolveConnection({ url: given("url"), token: given("token"), context: given("context") }, this.io.env, this.io.cwd);
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
    if (!answer || !/^y(es)?$/i.test(answer.trim())) throw new Exit(1, "not confirmed; nothing changed (pass --yes to skip the question)");
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
