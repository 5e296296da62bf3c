/**
 * The agent is an agent: it reports itself as `harbormaster-agent` (its own version, the instance
 * id of the desired entry) whenever the desired config names it, and a rollout of a new
 * `harbormaster-agent` image updates it in place:
 *
 *   1. download the build (a catalog image of kind `tarball`: the executable itself, or a tar
 *      holding `harbormaster-agent`) with the drivers' verified download, which keeps it only
 *      when it matches the desired digest;
 *   2. a trial: the new build runs `run --trial` on this state directory and must reach a report
 *      accepted by the server within `self_update.start_timeout_s` (a build that cannot start never
 *      replaces the running one);
 *   3. the swap: the running executable is kept as `<binary>.previous` (a hard link), the new one
 *      renamed over it, a marker written (self-update.json), and the agent exits (75) so systemd
 *      starts the new build;
 *   4. the new build's first accepted report clears the marker; one that does not report within the
 *      bound, or is started more than 3 times without reporting, renames `<binary>.previous` back
 *      and exits so systemd starts the previous build, which reports the failure.
 * A build that failed (its digest) is remembered and not tried again; its error stays in the reports.
 */
import { spawn } from "node:child_process";
import {
  closeSync,
  existsSync,
  linkSync,
  openSync,
  readSync,
  renameSync,
  rmSync,
  chmodSync,
  copyFileSync,
  mkdtempSync,
  readdirSync,
} from "node:fs";
import { dirname, join } from "node:path";
import type { AgentSpec, DesiredConfig } from "../../src/model/server/schemas.ts";
import type { AgentDriver, ReportedAgent } from "../driver.ts";
import { BlobFetcher } from "../drivers/index.ts";
import type { Logger } from "./log.ts";
import { UnreadableStateFile, type Identity, type StateDir } from "./state.ts";
import { AGENT_NAME, AGENT_VERSION } from "./version.ts";

/** The exit status that asks the supervisor (systemd: Restart=on-failure) to start the agent again. */
export const EXIT_RESTART = 75;
const MAX_STARTS = 3;

export interface SwapMarker {
  from: string;
  to: string;
  digest: string;
  binary: string;
  previous: string;
  swapped_at: string;
  /** How many times the new build has started without reporting. */
  starts: number;
}

export interface FailedBuild {
  version: string;
  digest: string;
  reason: string;
  at: string;
}

type CatalogSpec = AgentSpec & {
  digest?: string;
  size?: number;
  source?: { blob?: string; ref?: string };
  kind?: string;
};

export interface SelfDriverOptions {
  state: StateDir;
  identity: Identity;
  /** The executable to replace; null when the agent does not run as the packaged build. */
  binary: string | null;
  /** Extra arguments the trial run needs to find the same configuration (`--config FILE`). */
  trialArgs: string[];
  startTimeoutS: number;
  log: Logger;
  /** Called after a swap: the loop ends after this pass's report and the process exits 75. */
  onRestart: () => void;
}

export class SelfDriver implements AgentDriver {
  private readonly o: SelfDriverOptions;
  private spec: AgentSpec | undefined;

  constructor(o: SelfDriverOptions) {
    this.o = o;
  }

  private blobs() {
    return new BlobFetcher({
      baseUrl: this.o.identity.url,
      token: this.o.identity.token,
      cacheDir: join(this.o.state.dir, "cache", "self"),
    });
  }

  async beforePass(desired: DesiredConfig) {
    // Reported only while wanted: an agent the config does not name would read as one to remove.
    this.spec = desired.lifecycle === "run" ? desired.agents.find((a) => a.name === AGENT_NAME) : undefined;
    // A build a killed agent was downloading is resumed while wanted, and deleted once not.
    await this.blobs().prune([(this.spec as CatalogSpec | undefined)?.digest]);
  }

  async list(): Promise<ReportedAgent[]> {
    if (!this.spec) return [];
    return [
      {
        name: AGENT_NAME,
        image: this.spec.image,
        version: AGENT_VERSION,
        instance_id: this.spec.instance_id,
        state: "running",
      },
    ];
  }

  async install(): Promise<void> {
    throw new Error("harbormaster-agent is this agent: it is updated in place, never installed");
  }

  async remove(): Promise<void> {
    throw new Error("harbormaster-agent does not remove itself: uninstall its package on the host");
  }

  async start(): Promise<void> {}

  async stop(): Promise<void> {}

  async update(_current: ReportedAgent, wanted: AgentSpec): Promise<void> {
    const spec = wanted as CatalogSpec;
    const { state, log } = this.o;
    let failed: FailedBuild | null;
    try {
      failed = state.read<FailedBuild>("self-update-failed.json");
    } catch (err) {
      if (!(err instanceof UnreadableStateFile)) throw err;
      // Which build failed is lost: trying it again is safe, as its trial comes before any swap.
      log.warn(`self-update: ${err.message}; the build that failed is forgotten`, {
        set_aside: state.setAside("self-update-failed.json"),
      });
      failed = null;
    }
    if (failed && failed.digest === spec.digest) {
      throw new Error(
        `build ${failed.version} (${failed.digest}) was tried on ${failed.at} and ${failed.reason}; still running ${AGENT_VERSION}, not trying it again`,
      );
    }
    const binary = this.o.binary;
    if (!binary)
      throw new Error(
        "this agent does not run as the packaged executable (self_update.binary is not set): it cannot update itself",
      );
    if (!spec.digest || !spec.source?.blob) {
      throw new Error(
        "a harbormaster-agent update needs a catalog image stored in Harbormaster (kind tarball: the executable, or a tar holding harbormaster-agent)",
      );
    }
    const fresh = `${binary}.new`;
    rmSync(fresh, { force: true });
    log.info("self-update: downloading", { version: spec.version, digest: spec.digest });
    // The drivers' verified download: resumed after a dropped connection, kept only when its
    // sha256 is the desired digest (else deleted, and this update fails saying so).
    const blobs = this.blobs();
    const download = await blobs.fetch(spec.source.blob, spec.digest, spec.size);
    try {
      await unpackExecutable(download, fresh);
    } finally {
      await blobs.discard(spec.digest);
    }
    const fail = (reason: string) => {
      rmSync(fresh, { force: true });
      state.write("self-update-failed.json", {
        version: spec.version,
        digest: spec.digest!,
        reason,
        at: new Date().toISOString(),
      } satisfies FailedBuild);
      return new Error(`build ${spec.version} ${reason}; still running ${AGENT_VERSION}`);
    };
    log.info("self-update: trial run of the new build", { version: spec.version });
    const trial = await trialRun(
      fresh,
      ["run", "--trial", "--state-dir", state.dir, ...this.o.trialArgs],
      this.o.startTimeoutS * 1000,
    );
    if (!trial.ok) throw fail(`did not start: ${trial.reason}`);
    const previous = `${binary}.previous`;
    state.write("self-update.json", {
      from: AGENT_VERSION,
      to: spec.version,
      digest: spec.digest,
      binary,
      previous,
      swapped_at: new Date().toISOString(),
      starts: 0,
    } satisfies SwapMarker);
    rmSync(previous, { force: true });
    try {
      linkSync(binary, previous);
    } catch {
      copyFileSync(binary, previous);
    }
    renameSync(fresh, binary);
    log.info("self-update: swapped; restarting into the new build", {
      from: AGENT_VERSION,
      to: spec.version,
      previous,
    });
    this.o.onRestart();
  }
}

/** The executable from a download: the file itself (ELF), or `harbormaster-agent` out of a tar (gzip or not). */
async function unpackExecutable(download: string, dest: string) {
  const head = Buffer.alloc(512);
  const fd = openSync(download, "r");
  let n: number;
  try {
    n = readSync(fd, head, 0, 512, 0);
  } finally {
    closeSync(fd);
  }
  const isTar = n >= 262 && head.subarray(257, 262).toString("latin1") === "ustar";
  const isGzip = head[0] === 0x1f && head[1] === 0x8b;
  if (!isTar && !isGzip) {
    // Copied beside the binary (the cache may be on another file system), so the swap is a rename.
    copyFileSync(download, dest);
    chmodSync(dest, 0o755);
    return;
  }
  const dir = mkdtempSync(join(dirname(dest), ".unpack-"));
  try {
    const r = await run("tar", ["-xf", download, "-C", dir], 120_000);
    if (!r.ok) throw new Error(`the build's archive could not be unpacked: ${r.reason}`);
    const inside = [join(dir, AGENT_NAME), join(dir, "bin", AGENT_NAME)].find((p) => existsSync(p));
    if (!inside) throw new Error(`the build's archive holds no ${AGENT_NAME} (at its top or in bin/)`);
    copyFileSync(inside, dest);
    chmodSync(dest, 0o755);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

type RunResult = { ok: true } | { ok: false; reason: string };

function run(cmd: string, args: string[], timeoutMs: number, env?: NodeJS.ProcessEnv): Promise<RunResult> {
  return new Promise((resolve) => {
    let out = "";
    let child;
    try {
      child = spawn(cmd, args, { stdio: ["ignore", "pipe", "pipe"], env });
    } catch (err) {
      return resolve({ ok: false, reason: (err as Error).message });
    }
    const keep = (d: Buffer) => (out = (out + d.toString()).slice(-2000));
    child.stdout.on("data", keep);
    child.stderr.on("data", keep);
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.on("error", (err) => {
      clearTimeout(timer);
      resolve({ ok: false, reason: err.message });
    });
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      const tail = out.trim().split("\n").slice(-3).join(" | ").replace(/^<\d>/gm, "");
      if (code === 0) resolve({ ok: true });
      else if (signal === "SIGKILL")
        resolve({ ok: false, reason: `no report accepted within ${timeoutMs / 1000} s${tail ? ` (${tail})` : ""}` });
      else resolve({ ok: false, reason: `exited with ${code ?? signal}${tail ? `: ${tail}` : ""}` });
    });
  });
}

/** Runs the new build until its first accepted report (it exits 0 then), at most `timeoutMs`. */
function trialRun(binary: string, args: string[], timeoutMs: number): Promise<RunResult> {
  // The trial is told its own bound too, so it gives up (and says why) before it is killed.
  return run(binary, args, timeoutMs + 5_000, {
    ...process.env,
    HARBORMASTER_AGENT_START_TIMEOUT_S: String(Math.ceil(timeoutMs / 1000)),
    // The trial stops when this process is gone (see ./run.ts): nobody would wait for its answer.
    HARBORMASTER_AGENT_TRIAL_PARENT: String(process.pid),
  });
}

/**
 * What a self-update killed before its swap left beside the executable: the new build being
 * written or tried (`<binary>.new`) and a half-unpacked archive (`.unpack-*`). Run at the start of
 * `run`, after checkSwapOnStart (a swap in progress has already renamed its `.new`).
 */
export function sweepSelfUpdateLeftovers(binary: string | null): string[] {
  if (!binary) return [];
  const dir = dirname(binary);
  const swept = [`${binary}.new`].filter((p) => existsSync(p));
  let names: string[] = [];
  try {
    names = readdirSync(dir);
  } catch {
    // An unreadable directory holds nothing of ours we could remove either.
  }
  swept.push(...names.filter((n) => /^\.unpack-[A-Za-z0-9]{6}$/.test(n)).map((n) => join(dir, n)));
  for (const p of swept) rmSync(p, { recursive: true, force: true });
  return swept;
}

export type StartCheck =
  | { kind: "none" }
  /** A swapped build is starting: it must report within the bound (`confirm` on its first accepted report). */
  | { kind: "trial"; marker: SwapMarker; confirm: () => void; rollback: (reason: string) => void }
  /** The swap was undone (or never happened): the marker is cleared, this build runs on. */
  | { kind: "not_swapped"; marker: SwapMarker }
  /** The new build failed too often: the previous one is back in place; exit so it starts. */
  | { kind: "rolled_back"; marker: SwapMarker; reason: string };

const isSwapMarker = (v: unknown): v is SwapMarker => {
  if (typeof v !== "object" || v === null) return false;
  const m = v as Record<string, unknown>;
  const text = (k: string) => typeof m[k] === "string";
  // The versions and paths are acted on: they must name something.
  return (
    ["from", "to", "binary", "previous"].every((k) => text(k) && m[k] !== "") &&
    text("digest") &&
    text("swapped_at") &&
    Number.isSafeInteger(m.starts)
  );
};

/** What a starting `run` finds of a self-update in progress (see the top of this file). */
export function checkSwapOnStart(state: StateDir, log: Logger, version = AGENT_VERSION): StartCheck {
  let marker: SwapMarker | null;
  try {
    marker = state.read<SwapMarker>("self-update.json");
    // JSON of another shape is as unreadable: its paths would be renamed and removed below.
    if (marker !== null && !isSwapMarker(marker))
      throw new UnreadableStateFile(state.path("self-update.json"), "not a swap marker");
  } catch (err) {
    if (!(err instanceof UnreadableStateFile)) throw err;
    // Which build was swapped in, and where the previous one is, are lost: this build runs on (it
    // started, so it can), and a crash on every start would help nobody.
    log.error(
      `self-update: ${err.message}; running this build (${version}) as it is, without a rollback to fall back on`,
      { set_aside: state.setAside("self-update.json") },
    );
    return { kind: "none" };
  }
  if (!marker) return { kind: "none" };
  const rollback = (reason: string) => {
    if (existsSync(marker.previous)) renameSync(marker.previous, marker.binary);
    else log.error("self-update: no previous build to fall back to", { previous: marker.previous });
    state.write("self-update-failed.json", {
      version: marker.to,
      digest: marker.digest,
      reason,
      at: new Date().toISOString(),
    } satisfies FailedBuild);
    state.remove("self-update.json");
    log.error("self-update: the new build failed; the previous one is back", {
      to: marker.to,
      from: marker.from,
      reason,
    });
  };
  if (marker.to !== version) {
    // The old build runs: the swap never happened (a crash before the rename) or was undone.
    rmSync(`${marker.binary}.new`, { force: true });
    state.remove("self-update.json");
    log.warn("self-update: the swap did not complete; running on", { to: marker.to, running: version });
    return { kind: "not_swapped", marker };
  }
  marker.starts++;
  if (marker.starts > MAX_STARTS) {
    const reason = `started ${MAX_STARTS} times without a report accepted`;
    rollback(reason);
    return { kind: "rolled_back", marker, reason };
  }
  state.write("self-update.json", marker);
  return {
    kind: "trial",
    marker,
    confirm: () => {
      state.remove("self-update.json");
      log.info("self-update: the new build reported; update done", { from: marker.from, to: marker.to });
    },
    rollback,
  };
}
