// The processes on this machine as /proc tells them (Linux): what the benchmarks read the local
// runtime's CPU time and memory from.
import { readdirSync, readFileSync, readlinkSync } from "node:fs";

export interface ProcStat {
  ppid: number;
  comm: string;
  /** User + system CPU, in clock ticks. */
  ticks: number;
  rssPages: number;
}

/** Every process readable now; null when /proc cannot be read. */
export function procStats(): Map<number, ProcStat> | null {
  const stats = new Map<number, ProcStat>();
  try {
    for (const entry of readdirSync("/proc")) {
      if (!/^\d+$/.test(entry)) continue;
      try {
        const text = readFileSync(`/proc/${entry}/stat`, "utf8");
        const close = text.lastIndexOf(")");
        const fields = text.slice(close + 2).split(" ");
        // After "pid (comm) ": state, ppid, …; utime and stime are the stat file's fields 14 and 15.
        stats.set(Number(entry), {
          ppid: Number(fields[1]),
          comm: text.slice(text.indexOf("(") + 1, close),
          ticks: Number(fields[11]) + Number(fields[12]),
          rssPages: Number(fields[21]),
        });
      } catch {
        // the process ended meanwhile
      }
    }
  } catch {
    return null;
  }
  return stats;
}

export const PAGE_BYTES = 4096;

/** The socket inodes listening on a local TCP port, IPv4 or IPv6 (/proc/net/tcp: state 0A). */
function listeningInodes(port: number): Set<string> {
  const inodes = new Set<string>();
  const hexPort = port.toString(16).toUpperCase().padStart(4, "0");
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text: string;
    try {
      text = readFileSync(table, "utf8");
    } catch {
      continue;
    }
    for (const line of text.split("\n").slice(1)) {
      // sl, local_address, rem_address, st, tx:rx, tr:when, retrnsmt, uid, timeout, inode
      const f = line.trim().split(/\s+/);
      if (f.length > 9 && f[3] === "0A" && f[1].endsWith(`:${hexPort}`)) inodes.add(f[9]);
    }
  }
  return inodes;
}

/** The process whose descriptors hold a socket listening on a local TCP port; null if none is readable. */
function listenerOf(port: number): number | null {
  const inodes = listeningInodes(port);
  if (inodes.size === 0) return null;
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${entry}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      try {
        const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${entry}/fd/${fd}`));
        if (m && inodes.has(m[1])) return Number(entry);
      } catch {
        // closed meanwhile
      }
    }
  }
  return null;
}

/**
 * Resident memory (MB) of the local runtime serving `base`: every workerd process under the one
 * that started the listener on its port (`wrangler dev`'s node, whose workerd children are its
 * proxy and the runtime that runs Harbormaster). Found by the port, so it is the memory of that
 * server and no other on the machine; null when /proc does not tell.
 */
export function runtimeRssMbAt(base: string): number | null {
  const stats = procStats();
  const url = new URL(base);
  const listener = listenerOf(Number(url.port || (url.protocol === "https:" ? 443 : 80)));
  if (!stats || listener === null || !stats.has(listener)) return null;
  const self = stats.get(listener)!;
  // A workerd listening is one of the server's children: the server is its parent.
  const root = self.comm.startsWith("workerd") ? self.ppid : listener;
  const under = (pid: number): boolean => pid === root || (pid > 1 && stats.has(pid) && under(stats.get(pid)!.ppid));
  let pages = 0;
  for (const [pid, s] of stats) if (s.comm.startsWith("workerd") && under(pid)) pages += s.rssPages;
  return pages ? (pages * PAGE_BYTES) / 2 ** 20 : null;
}
