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
 * An abstract name has no owner nor mode: any local user may bind any free one. The name is
 * therefore keyed by a random secret kept in the directory (0700, `run.key`, 0600), not by its
 * path alone, which anyone knows: an unprivileged user who bound that first would keep the
 * service out at every start, and the host's agents unmanaged.
 */
import { createHash, randomBytes } from "node:crypto";
import { closeSync, fsyncSync, linkSync, openSync, readFileSync, realpathSync, rmSync, writeSync } from "node:fs";
import { createConnection, createServer } from "node:net";
import { join } from "node:path";

type StateDirHold =
  | { held: true; release: () => Promise<void> }
  /** Another process holds it: its pid as it says it (null when it did not say within a moment). */
  | { held: false; holder: number | null };

/** The socket's name: the abstract namespace (a leading NUL) is one per network namespace, not a file. */
const holdName = (dir: string) =>
  `\0harbormaster-agent.${createHash("sha256").update(realpathSync(dir)).update("\0").update(holdKey(dir)).digest("hex").slice(0, 40)}`;

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
export function holdStateDir(dir: string): Promise<StateDirHold> {
  const name = holdName(dir);
  return new Promise((resolve, reject) => {
    // Whoever asks is told the holder's pid, for the message that names it.
    const server = createServer((socket) => socket.end(`${process.pid}\n`));
    server.once("error", (err: NodeJS.ErrnoException) => {
      if (err.code !== "EADDRINUSE") return reject(err);
      holderPid(name).then((holder) => resolve({ held: false, holder }));
    });
    server.listen(name, () => {
      // Not what keeps the process alive: the loop does.
      server.unref();
      resolve({ held: true, release: () => new Promise((done) => server.close(() => done())) });
    });
  });
}

/** The pid the holder says, or null when it does not answer within a second. */
function holderPid(name: string): Promise<number | null> {
  return new Promise((resolve) => {
    let said = "";
    const socket = createConnection(name);
    const give = (pid: number | null) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(pid);
    };
    const timer = setTimeout(() => give(null), 1000);
    socket.setEncoding("utf8");
    socket.on("data", (d: string) => (said += d.slice(0, 32)));
    socket.on("end", () => give(/^\d+\n$/.test(said) ? Number(said) : null));
    socket.on("error", () => give(null));
  });
}
