/**
 * What the agent keeps in its state directory (root-only: the directory 0700, every file 0600):
 *   identity.json     the server it joined as: URL, server id, server token (a secret);
 *   status.json       what the running loop last did (for `harbormaster-agent status`);
 *   reboot.json       a reboot in progress (./reboot.ts), so a crash anywhere converges;
 *   self-update.json  a swap of its own executable in progress (./self-update.ts);
 *   self-update-failed.json  the last build that could not start (not tried again).
 *   run.json          this run's start, removed when it ends as it should: a crash leaves it (./crash-backoff.ts).
 * Every write is whole or not at all: a temporary file, fsync'd, renamed over the old one. A file
 * that still cannot be read (a disk that lost blocks, a hand edit) is an UnreadableStateFile, which
 * each reader turns into what is safe for it, never a crash loop.
 */
import {
  readdirSync,
  closeSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  rmSync,
  writeSync,
  chmodSync,
  statSync,
} from "node:fs";
import { join } from "node:path";
import { z } from "zod";

// Every field has been written since the first release; loose, so a newer release's additions
// survive an older one reading the file.
const IdentityFile = z.looseObject({
  url: z.url({ protocol: /^https?$/ }),
  server_id: z.string().min(1),
  fleet: z.string(),
  hostname: z.string(),
  /** The server's own token (`hms.…`). */
  token: z.string().min(1),
  reboot_group: z.string(),
  fleetlock_id: z.string().nullable(),
  machine_id: z.string(),
  joined_at: z.string(),
});
export type Identity = z.infer<typeof IdentityFile>;

/** A file of the state directory that is there but cannot be used: not JSON, or not what it should hold. */
export class UnreadableStateFile extends Error {
  readonly file: string;
  constructor(file: string, reason: string) {
    super(`${file} cannot be read (${reason})`);
    this.file = file;
  }
}

export interface StatusFile {
  pid: number;
  version: string;
  started_at: string;
  transport: "channel" | "http";
  /** Whether the channel is open now (over HTTP: whether the last call got through). */
  connected: boolean;
  desired_generation: number | null;
  last_report: {
    at: string;
    generation: number;
    status: string;
    agents: { name: string; version: string; state: string }[];
    errors: number;
  } | null;
  last_error: { at: string; message: string } | null;
  /** Set when the loop ended (why), null while it runs. */
  exited: { at: string; reason: string } | null;
  /**
   * While a start waits out its crash backoff (./crash-backoff.ts): when it connects, after how
   * many crashes in a row. Absent from the files of releases before it.
   */
  crash_backoff?: { until: string; crashes: number } | null;
}

export class StateDir {
  readonly dir: string;

  constructor(dir: string) {
    this.dir = dir;
  }

  path(name: string) {
    return join(this.dir, name);
  }

  /** Creates the directory (0700) if missing; tightens one that exists. */
  ensure() {
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    if ((statSync(this.dir).mode & 0o777) !== 0o700) chmodSync(this.dir, 0o700);
  }

  read<T>(name: string): T | null {
    let text: string;
    try {
      text = readFileSync(this.path(name), "utf8");
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === "ENOENT") return null;
      // Not root (`status` without sudo): no damage, and nothing to set aside or restore.
      if (code === "EACCES" || code === "EPERM") throw err;
      // A disk that lost blocks answers EIO rather than garbage: as unreadable as a file cut
      // short, and each reader's safe answer is the same (thrown as is, it crashed every start).
      throw new UnreadableStateFile(this.path(name), code ?? (err as Error).message);
    }
    try {
      return JSON.parse(text) as T;
    } catch (err) {
      // Never the parser's message: it quotes the text, and identity.json holds the token.
      const at = /at position (\d+)/.exec((err as Error).message)?.[1];
      throw new UnreadableStateFile(
        this.path(name),
        text.trim() === "" ? "empty" : `not JSON${at ? `, from character ${at} of ${text.length}` : ""}`,
      );
    }
  }

  /**
   * `durable: false` for what only informs (status.json, rewritten every heartbeat): still whole or
   * not at all, but not flushed to disk, which a crash may cost and nothing depends on.
   */
  write(name: string, value: unknown, { durable = true }: { durable?: boolean } = {}) {
    this.ensure();
    const target = this.path(name);
    const tmp = `${target}.tmp-${process.pid}`;
    const fd = openSync(tmp, "w", 0o600);
    try {
      try {
        writeAll(fd, Buffer.from(`${JSON.stringify(value, null, 2)}\n`));
        if (durable) fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
    } catch (err) {
      // A disk that filled up: the old file stays as it was, and the temporary does not hold on
      // to the little room left until the next start sweeps it.
      rmSync(tmp, { force: true });
      throw err;
    }
    renameSync(tmp, target);
    if (!durable) return;
    // The rename is durable once the directory is.
    const dfd = openSync(this.dir, "r");
    try {
      fsyncSync(dfd);
    } finally {
      closeSync(dfd);
    }
  }

  /**
   * Deletes the temporaries of writes a killed process never renamed (`NAME.tmp-PID`, its pid
   * not this one's): at the start of `run`, before anything here writes.
   */
  sweepTemporaries(): string[] {
    let names: string[];
    try {
      names = readdirSync(this.dir);
    } catch {
      return [];
    }
    const swept = names.filter((n) => /\.tmp-\d+$/.test(n) && !n.endsWith(`.tmp-${process.pid}`));
    for (const n of swept) rmSync(this.path(n), { force: true });
    return swept;
  }

  /**
   * Moves an unreadable file out of the way (to `NAME.unreadable`, kept for a person to look at), so
   * its reader can go on as if it were absent; false when it could not be moved either.
   */
  setAside(name: string): boolean {
    try {
      renameSync(this.path(name), this.path(`${name}.unreadable`));
      return true;
    } catch {
      return false;
    }
  }

  remove(name: string) {
    rmSync(this.path(name), { force: true });
  }

  /** The identity `join` wrote; an UnreadableStateFile when it is not one (the token is never quoted). */
  identity(): Identity | null {
    const raw = this.read<unknown>("identity.json");
    if (raw === null) return null;
    const parsed = IdentityFile.safeParse(raw);
    if (!parsed.success)
      throw new UnreadableStateFile(
        this.path("identity.json"),
        `not an identity: ${parsed.error.issues.map((i) => `${i.path.join(".") || "(the file)"}: ${i.message}`).join("; ")}`,
      );
    return parsed.data;
  }
}

/**
 * Writes all of `bytes`: write(2) on a nearly full disk writes what fits and says so without
 * failing (only the next call fails, ENOSPC), and writeSync() makes one call: the rest would be
 * silently missing from a file then renamed over the good one.
 */
function writeAll(fd: number, bytes: Uint8Array) {
  for (let at = 0; at < bytes.length;) at += writeSync(fd, bytes, at, bytes.length - at);
}
