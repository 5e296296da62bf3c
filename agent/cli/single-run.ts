/**
 * One `run` per state directory. Two loops on one directory would drive the same containers and
 * hooks at once and delete each other's temporaries; the second to start says which process holds
 * the directory and stops.
 *
 * The hold is a listening socket in Linux's abstract namespace, named after the directory's real
 * path, rather than a pid file: binding a name is atomic (two starts at the same instant cannot
 * both win), and the kernel frees it when its process ends however it ends (SIGKILL, a power cut
 * needs nothing either), where a pid file left by a killed run would need judging (is that pid
 * still ours, or a reused one?) with a race between the judging and the taking over. It lives as
 * long as the socket's network namespace, the host's for the service.
 *
 * An abstract name has no owner nor mode: any local user may bind any free one, and see in
 * /proc/net/unix the names bound. A user who bound the agent's name first would keep the service
 * out at every start (exit 1, retried forever), and the host's agents unmanaged. So the name is
 * keyed by a random secret kept in the directory (0700, `run.key`, 0600), not by its path alone,
 * which anyone knows; and a name found bound by a process of another user (one that saw it in use
 * and took it when the run ended) is passed over for the next of a sequence every run walks the
 * same way: a second run still finds the first, on whichever name it holds. The holder is found
 * through /proc (the socket's inode, the process with it open), never asked: the hold takes no
 * connection, so none can keep it from being given back.
 */
import { createHash, randomBytes } from "node:crypto";
import {
  closeSync,
  fsyncSync,
  linkSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  rmSync,
  statSync,
  writeSync,
} from "node:fs";
import { createServer, type Server } from "node:net";
import { join } from "node:path";

type StateDirHold =
  | { held: true; release: () => Promise<void> }
  /** Another run holds it: its pid (null when it is not to be seen from here, or ended as it was looked for). */
  | { held: false; holder: number | null };

/** How many names a run tries: each one past the first needs a squatter who watched a run end. */
const NAMES = 32;

/** A name of the sequence: the abstract namespace (a leading NUL) is one per network namespace. */
const holdName = (seed: string, i: number) =>
  `\0harbormaster-agent.${createHash("sha256").update(seed).update(`\0${i}`).digest("hex").slice(0, 40)}`;

/**
 * The directory's secret, made by the first run: written whole and synced under a temporary name,
 * then linked into place, which fails when it exists: two first starts at once both end up with
 * the one that was linked first, and a kill at any point leaves either no key or a whole one (the
 * temporary is swept by the next start, ./state.ts).
 */
function holdKey(dir: string): Buffer {
  const path = join(dir, "run.key");
  try {
    return readFileSync(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
  }
  const tmp = `${path}.tmp-${process.pid}`;
  const fd = openSync(tmp, "w", 0o600);
  try {
    try {
      writeSync(fd, randomBytes(32).toString("hex"));
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    linkSync(tmp, path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
  } finally {
    rmSync(tmp, { force: true });
  }
  return readFileSync(path);
}

/** Takes the state directory for this process, or says who has it. */
export async function holdStateDir(dir: string): Promise<StateDirHold> {
  const seed = `${realpathSync(dir)}\0${holdKey(dir).toString("hex")}`;
  for (let i = 0; i < NAMES; i++) {
    const name = holdName(seed, i);
    for (let tries = 0; ; tries++) {
      const server = await listen(name);
      if (server) return { held: true, release: () => new Promise((done) => server.close(() => done())) };
      const holder = holderOf(name);
      // A holder that ended between the refused bind and the look through /proc leaves a name
      // no one has: taken on a second try, never passed over (a third run would take it beside us).
      if (holder === "gone" && tries === 0) continue;
      if (holder === "foreign") break;
      return { held: false, holder: holder === "gone" ? null : holder };
    }
  }
  throw new Error(`every name of the state directory's hold is bound by another user's process (${NAMES} tried)`);
}

/** Listens on `name`, or null when it is bound already. */
function listen(name: string): Promise<Server | null> {
  return new Promise((resolve, reject) => {
    // A hold takes no connection: one kept open would keep close() from ever calling back.
    const server = createServer((socket) => socket.destroy());
    server.once("error", (err: NodeJS.ErrnoException) => (err.code === "EADDRINUSE" ? resolve(null) : reject(err)));
    server.listen(name, () => {
      // Not what keeps the process alive: the loop does.
      server.unref();
      resolve(server);
    });
  });
}

/**
 * Who listens on an abstract `name`: the pid of a process of this user with the socket open;
 * "foreign" when the process is another user's; null when no process seen here has it open (one
 * in another PID namespace on the same network, a `run` in a container on the host's network:
 * a holder all the same); "gone" when no one listens any more. Run as root (the service), every
 * process of this PID namespace can be looked into; run as another user, another user's holder
 * goes unseen and counts as a holder, which keeps out only that user's own runs.
 */
function holderOf(name: string): number | null | "foreign" | "gone" {
  const path = `@${name.slice(1)}`;
  const inodes = new Set<string>();
  for (const line of readFileSync("/proc/net/unix", "utf8").split("\n").slice(1)) {
    const f = line.trim().split(/\s+/);
    // Flags 00010000: listening.
    if (f[7] === path && f[3] === "00010000") inodes.add(f[6]);
  }
  if (inodes.size === 0) return "gone";
  const uid = process.geteuid?.();
  for (const pid of readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue; // ended meanwhile, or not ours to read
    }
    for (const fd of fds) {
      let to: string;
      try {
        to = readlinkSync(`/proc/${pid}/fd/${fd}`);
      } catch {
        continue;
      }
      const inode = /^socket:\[(\d+)\]$/.exec(to)?.[1];
      if (!inode || !inodes.has(inode)) continue;
      try {
        return statSync(`/proc/${pid}`).uid === uid ? Number(pid) : "foreign";
      } catch {
        return "gone";
      }
    }
  }
  return null;
}
