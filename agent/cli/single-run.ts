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
 */
import { createHash } from "node:crypto";
import { realpathSync } from "node:fs";
import { createConnection, createServer } from "node:net";

type StateDirHold =
  | { held: true; release: () => Promise<void> }
  /** Another process holds it: its pid as it says it (null when it did not say within a moment). */
  | { held: false; holder: number | null };

/** The socket's name: the abstract namespace (a leading NUL) is one per network namespace, not a file. */
const holdName = (dir: string) =>
  `\0harbormaster-agent.${createHash("sha256").update(realpathSync(dir)).digest("hex").slice(0, 40)}`;

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
