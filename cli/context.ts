import type { Command } from "commander";
import { Api } from "./api.ts";
import { resolveConnection, UsageError, type Connection } from "./config.ts";
import { Exit, Output, readLine, type Io } from "./io.ts";

export interface Globals {
  url?: string;
  token?: string;
  json?: boolean;
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

  get out(): Output {
    return new Output(this.io, !!this.globals.json, this.globals.color !== false);
  }

  get connection(): Connection {
    if (!this.conn) {
      try {
        this.conn = resolveConnection({ url: this.globals.url, token: this.globals.token }, this.io.env, this.io.cwd);
      } catch (err) {
        if (err instanceof UsageError) throw new Exit(2, err.message);
        throw err;
      }
    }
    return this.conn;
  }

  get api(): Api {
    this.client ??= new Api(this.connection.url, this.connection.token, this.io.fetch);
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
