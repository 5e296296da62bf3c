/** `harbormaster-agent status`: what the agent holds, what it last reported, whether it is connected. */
import type { RebootState } from "./reboot.ts";
import type { FailedBuild, SwapMarker } from "./self-update.ts";
import { UnreadableStateFile, type StateDir, type StatusFile } from "./state.ts";
import { AGENT_VERSION } from "./version.ts";

export interface StatusView {
  version: string;
  state_dir: string;
  joined: null | {
    url: string;
    server_id: string;
    fleet: string;
    hostname: string;
    reboot_group: string;
    fleetlock_id: string | null;
    joined_at: string;
  };
  running: boolean;
  loop: StatusFile | null;
  reboot: RebootState | null;
  self_update: { in_progress: SwapMarker | null; last_failed: FailedBuild | null };
  /** Files of the state directory that are there but cannot be read: each why. */
  unreadable: string[];
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
};

export function statusView(state: StateDir): StatusView {
  // status is what a person reads when something is wrong: one bad file is shown, never a crash.
  const unreadable: string[] = [];
  const readOrNote = <T>(read: () => T | null): T | null => {
    try {
      return read();
    } catch (err) {
      if (!(err instanceof UnreadableStateFile)) throw err;
      unreadable.push(err.message);
      return null;
    }
  };
  const id = readOrNote(() => state.identity());
  const loop = readOrNote(() => state.read<StatusFile>("status.json"));
  const running = !!loop && loop.exited === null && alive(loop.pid);
  return {
    version: AGENT_VERSION,
    state_dir: state.dir,
    // Never the token: status is for reading over a shoulder.
    joined: id
      ? {
          url: id.url,
          server_id: id.server_id,
          fleet: id.fleet,
          hostname: id.hostname,
          reboot_group: id.reboot_group,
          fleetlock_id: id.fleetlock_id,
          joined_at: id.joined_at,
        }
      : null,
    running,
    loop: loop ? { ...loop, connected: running && loop.connected } : null,
    reboot: readOrNote(() => state.read<RebootState>("reboot.json")),
    self_update: {
      in_progress: readOrNote(() => state.read<SwapMarker>("self-update.json")),
      last_failed: readOrNote(() => state.read<FailedBuild>("self-update-failed.json")),
    },
    unreadable,
  };
}

export function formatStatus(v: StatusView): string {
  const lines: string[] = [];
  lines.push(`harbormaster-agent ${v.version} (state in ${v.state_dir})`);
  for (const u of v.unreadable) lines.push(`unreadable: ${u}`);
  if (!v.joined) {
    lines.push(
      v.unreadable.some((u) => u.includes("identity.json"))
        ? "joined, but its identity cannot be read: restore identity.json, or remove it and join again"
        : "not joined: run `harbormaster-agent join URL TOKEN`",
    );
    return lines.join("\n");
  }
  const j = v.joined;
  lines.push(`joined:     ${j.hostname} in fleet ${j.fleet} (server ${j.server_id}) at ${j.url}, since ${j.joined_at}`);
  lines.push(`reboots:    group ${j.reboot_group}, FleetLock id ${j.fleetlock_id ?? "(none)"}`);
  const l = v.loop;
  if (!l) lines.push("loop:       has not run yet");
  else if (!v.running)
    lines.push(
      `loop:       not running${l.exited ? ` (ended ${l.exited.at}: ${l.exited.reason})` : ` (pid ${l.pid} is gone)`}`,
    );
  else if (l.crash_backoff)
    lines.push(
      `loop:       backing off until ${l.crash_backoff.until} after ${l.crash_backoff.crashes} crash${l.crash_backoff.crashes === 1 ? "" : "es"} in a row (pid ${l.pid}, ${l.version}, since ${l.started_at}); it connects then`,
    );
  else
    lines.push(
      `loop:       running (pid ${l.pid}, ${l.version}, since ${l.started_at}), ${l.connected ? "connected" : "not connected"} over ${l.transport}`,
    );
  if (l?.last_report) {
    const r = l.last_report;
    lines.push(`reported:   generation ${r.generation} at ${r.at || "(not yet)"}: ${r.status}, ${r.errors} error(s)`);
    for (const a of r.agents) lines.push(`            ${a.name} ${a.version} ${a.state}`);
  } else if (l) lines.push("reported:   nothing yet");
  if (l?.last_error) lines.push(`last error: ${l.last_error.message} (${l.last_error.at})`);
  if (v.reboot) lines.push(`reboot:     ${v.reboot.phase} since ${v.reboot.since} (boot ${v.reboot.boot_id})`);
  if (v.self_update.in_progress)
    lines.push(`update:     to ${v.self_update.in_progress.to} in progress (from ${v.self_update.in_progress.from})`);
  if (v.self_update.last_failed)
    lines.push(`update:     build ${v.self_update.last_failed.version} ${v.self_update.last_failed.reason}`);
  return lines.join("\n");
}
