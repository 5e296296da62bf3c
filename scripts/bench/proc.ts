// The processes on this machine as /proc tells them (Linux): what the benchmarks read the local
// runtime's CPU time and memory from.
import { readdirSync, readFileSync } from "node:fs";

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
