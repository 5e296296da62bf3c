import type { AgentSpec, DesiredConfig, InventoryReport } from "../src/model/server/schemas.ts";

export type ReportedAgent = InventoryReport["agents"][number];
export type ReportError = InventoryReport["errors"][number];
export type Assignments = InventoryReport["assignments"];
/**
 * An agent as a driver lists it: what the report says of it, and, when its state is `failed`,
 * why (a failing health check's or status hook's output). reconcile() reports the reason as an
 * error of op `start` (the protocol has no health op) and sends only the protocol's fields.
 */
export type ListedAgent = ReportedAgent & { reason?: string };

/**
 * How a host agent acts on its machine. The loop decides what to do; the driver does it (a
 * container runtime, systemd units, packages) and says what is really there. Every method throws
 * on failure with a message worth showing an operator: the loop reports it, it does not retry
 * within one pass.
 */
export interface AgentDriver {
  /** What is installed now, as the machine says (never what the loop last asked for). */
  list(): Promise<ListedAgent[]>;
  install(spec: AgentSpec): Promise<void>;
  /** Move an installed agent to the spec's image and version, keeping its data. */
  update(current: ReportedAgent, spec: AgentSpec): Promise<void>;
  /** Uninstall an agent and its data. */
  remove(current: ReportedAgent): Promise<void>;
  start(current: ReportedAgent): Promise<void>;
  /** Stop an agent, keeping its data (a `terminate` order). */
  stop(current: ReportedAgent): Promise<void>;
  /** Workload units and storage attachments this host carries (they block an uninstall). */
  assignments?(): Promise<Assignments>;
  /** Told the desired config at the start of each pass, before `list()` (a driver whose truth depends on it). */
  beforePass?(desired: DesiredConfig): Promise<void>;
}

export interface ReconcileOutcome {
  errors: ReportError[];
  /** How many driver operations ran (installs, updates, removals, starts, stops). */
  operations: number;
  /** What to report: the machine's truth after this pass. */
  agents: ReportedAgent[];
  /**
   * Set when the machine could not be asked what it runs (the engine hangs or fails): `agents`
   * are as last seen, each with an error saying so. Never taken for the machine's truth: a
   * lifecycle order is not done on it.
   */
  unknown?: true;
  /** With `unknown`: why the machine could not be asked (the engine's or the driver's error). */
  cause?: string;
  /**
   * The machine's truth before this pass healed it, when it started an agent it found stopped or
   * failed: reported first, so a container killed between two passes shows in the server's
   * history instead of vanishing behind its restart.
   */
  found?: { agents: ReportedAgent[]; errors: ReportError[] };
}

const messageOf = (err: unknown) => {
  const m = err instanceof Error ? err.message : String(err);
  return (m || "failed").slice(0, 4096);
};

/**
 * How often an agent found down is started again. The first restart is at once (one crash is
 * healed by the next pass); each further one waits twice as long as the one before, from `baseMs`
 * up to `capMs`, so an agent that cannot stay up is not restarted at every pass (a container's
 * start, a hook's, with its load on the host, every heartbeat) for as long as it fails. An agent
 * that stays up `stableMs` after its last restart starts over: its next crash is healed at once.
 */
export interface RestartPolicy {
  baseMs: number;
  capMs: number;
  stableMs: number;
}

/** 30 s, 1 min, 2 min, ... up to 10 min between restarts; 10 min up counts as stable. */
export const RESTART_BACKOFF: RestartPolicy = { baseMs: 30_000, capMs: 600_000, stableMs: 600_000 };

/** An agent restarted by the last passes: how many times since it was last stable, and when last. */
export interface Restarts {
  times: number;
  at: number;
}

/** When an agent restarted `r.times` times, last at `r.at`, may be restarted again. */
function nextRestartAt(r: Restarts, policy: RestartPolicy): number {
  return r.at + Math.min(policy.capMs, policy.baseMs * 2 ** Math.min(r.times - 1, 30));
}

/** What reconcile() keeps from one pass to the next: the caller holds one for its machine. */
export class PassMemory {
  /** Agents found down and restarted, until they stay up for the policy's stable period. */
  readonly restarts = new Map<string, Restarts>();
  /** The machine's agents at the last look that worked: what a pass reports when it cannot look. */
  known: ListedAgent[] = [];
  /** Whether the machine ever answered a listing: until then `known` is no one's word. */
  answered = false;
  readonly policy: RestartPolicy;
  readonly now: () => number;

  constructor(opts: { policy?: RestartPolicy; now?: () => number } = {}) {
    this.policy = opts.policy ?? RESTART_BACKOFF;
    this.now = opts.now ?? Date.now;
  }
}

/**
 * One pass toward the desired config. `run`: install what is missing, update what differs, start
 * what is stopped (backing off from one that keeps stopping: `memory`, kept by the caller across
 * passes, counts its restarts), remove what is no longer wanted. `terminate`: stop every agent,
 * keep its data. `uninstall`: remove every agent. A failed operation becomes a report error for
 * that agent and the pass goes on; the report then lists the machine's truth, read back from the
 * driver. A pass that cannot read that truth (the engine hangs or fails) does nothing and says so:
 * what it last saw, each agent with an error (`unknown` set).
 */
export async function reconcile(
  desired: DesiredConfig,
  driver: AgentDriver,
  memory: PassMemory = new PassMemory(),
): Promise<ReconcileOutcome> {
  const errors: ReportError[] = [];
  try {
    return await pass(desired, driver, memory, errors);
  } catch (err) {
    return unanswered(desired, memory.known, errors, messageOf(err));
  }
}

/** reconcile()'s pass; throws only when the machine cannot be asked what it runs. */
async function pass(
  desired: DesiredConfig,
  driver: AgentDriver,
  memory: PassMemory,
  errors: ReportError[],
): Promise<ReconcileOutcome> {
  let operations = 0;
  const attempt = async (agent: string, op: ReportError["op"] | null, action: () => Promise<void>) => {
    operations++;
    try {
      await action();
    } catch (err) {
      // A failed stop has no error op in the protocol; the agent is then still reported running.
      if (op) errors.push({ agent, op, message: messageOf(err) });
    }
  };
  const look = async () => {
    memory.known = await driver.list();
    memory.answered = true;
    return memory.known;
  };
  await driver.beforePass?.(desired);
  const listed = await look();
  const installed = new Map(listed.map((a) => [a.name, a]));
  // The machine's truth after the pass: read again when anything was done, else what was just
  // read (a real driver's list() spawns its engine and runs health checks: once per idle pass).
  const after = async () => (operations === 0 ? listed : await look());

  if (desired.lifecycle === "run") {
    const { restarts, policy } = memory;
    // When the pass saw what runs: an agent seen running has been up since its restart until then.
    const seenAt = memory.now();
    let healed = false;
    // Restarts and removals first, installs and updates last: a transfer waits on an outsider (a
    // registry, a blob server, for minutes when it stalls), and an agent found down must not
    // stay down behind another's download, nor an unwanted one run on meanwhile.
    const moving = (spec: AgentSpec, current: ListedAgent) =>
      current.image !== spec.image || current.version !== spec.version;
    for (const spec of desired.agents) {
      const current = installed.get(spec.name);
      if (!current || moving(spec, current)) continue;
      if (current.state !== "running") {
        // Read here, not at the pass's start: a restart before it may have taken minutes (a slow
        // engine), and a restart dated from then would look stable (its crash loop forgotten) too soon.
        const now = memory.now();
        const why = (current as ListedAgent).reason ?? `it was ${current.state}`;
        const last = restarts.get(spec.name);
        const next = last ? nextRestartAt(last, policy) : now;
        if (now < next) {
          // Backing off: left down this pass, and said why (reported as the machine has it).
          errors.push({
            agent: spec.name,
            op: "start",
            message:
              `down again after ${last!.times} restart${last!.times > 1 ? "s" : ""}; the next in ${Math.ceil((next - now) / 1000)} s: ${why}`.slice(
                0,
                4096,
              ),
          });
          continue;
        }
        healed = true;
        const before = errors.length;
        await attempt(spec.name, "start", () => driver.start(current));
        const times = (last?.times ?? 0) + 1;
        restarts.set(spec.name, { times, at: now });
        // Down again after an earlier restart, before it was stable: a crash loop, which the
        // restart would hide (the report would say running). Said as an error until it stays up.
        if (times > 1 && errors.length === before) {
          errors.push({
            agent: spec.name,
            op: "start",
            message:
              `stopped again after its restart (restart ${times}; the next not before ${Math.round((nextRestartAt({ times, at: now }, policy) - now) / 1000)} s): ${why}`.slice(
                0,
                4096,
              ),
          });
        }
      } else {
        const last = restarts.get(spec.name);
        if (last && seenAt - last.at >= policy.stableMs) restarts.delete(spec.name);
      }
    }
    const wanted = new Set(desired.agents.map((a) => a.name));
    for (const current of installed.values()) {
      if (!wanted.has(current.name)) await attempt(current.name, "remove", () => driver.remove(current));
    }
    for (const spec of desired.agents) {
      const current = installed.get(spec.name);
      if (!current) await attempt(spec.name, "install", () => driver.install(spec));
      else if (moving(spec, current)) {
        await attempt(spec.name, "update", () => driver.update(current, spec));
        // Another version (often the fix for a crash loop): its first crash is healed at once.
        restarts.delete(spec.name);
      }
    }
    for (const name of restarts.keys())
      if (!installed.has(name) || !desired.agents.some((a) => a.name === name)) restarts.delete(name);
    const foundErrors: ReportError[] = [];
    const found = healed ? { agents: reported(listed, foundErrors), errors: foundErrors } : undefined;
    return { errors, operations, agents: reported(await after(), errors), ...(found && { found }) };
  }

  if (desired.lifecycle === "uninstall") {
    for (const current of installed.values()) await attempt(current.name, "remove", () => driver.remove(current));
    return { errors, operations, agents: reported(await after(), errors) };
  }

  // terminate: the machine is going away; its agents stop and keep their data. What still runs
  // is reported (a failed stop); stopped agents are no longer the control plane's to report.
  for (const current of installed.values()) {
    if (current.state === "running") await attempt(current.name, null, () => driver.stop(current));
  }
  return {
    errors,
    operations,
    agents: reported(
      (await after()).filter((a) => a.state === "running"),
      errors,
    ),
  };
}

/**
 * A pass that could not ask the machine what it runs (a hung or failing engine): what it last saw
 * is reported, each agent (and each desired one it never saw) with an error saying why, for the
 * operation the pass would have done. The server then sees the host alive and its engine failing,
 * and the agents failed, where silence would only, minutes later, have made the host stale.
 */
function unanswered(
  desired: DesiredConfig,
  known: ListedAgent[],
  errors: ReportError[],
  why: string,
): ReconcileOutcome {
  const seen = new Map(known.map((a) => [a.name, a]));
  const wanted = new Map(desired.lifecycle === "run" ? desired.agents.map((a) => [a.name, a]) : []);
  const names = [...new Set([...wanted.keys(), ...seen.keys()])].sort();
  for (const name of names) {
    // An operation's own error (it ran before the machine stopped answering) says more.
    if (errors.some((e) => e.agent === name)) continue;
    const spec = wanted.get(name);
    const was = seen.get(name);
    const op: ReportError["op"] =
      desired.lifecycle === "uninstall" || !spec
        ? "remove"
        : !was
          ? "install"
          : was.image !== spec.image || was.version !== spec.version
            ? "update"
            : "start";
    errors.push({
      agent: name,
      op,
      message:
        `the machine could not be asked what it runs (${was ? `last seen ${was.state}` : "not seen installed"}): ${why}`.slice(
          0,
          4096,
        ),
    });
  }
  return { errors, operations: 0, agents: known.map(protocolFields), unknown: true, cause: why };
}

const protocolFields = ({ name, image, version, instance_id, state }: ListedAgent): ReportedAgent => ({
  name,
  image,
  version,
  instance_id,
  state,
});

/**
 * The listed agents as the protocol reports them; a failed agent's reason (an unhealthy check)
 * joins the errors when the pass has none for it already, so its status says why.
 */
function reported(listed: ListedAgent[], errors: ReportError[]): ReportedAgent[] {
  for (const a of listed) {
    if (a.state === "failed" && a.reason && !errors.some((e) => e.agent === a.name)) {
      errors.push({ agent: a.name, op: "start", message: a.reason.slice(0, 4096) || "failed" });
    }
  }
  return listed.map(protocolFields);
}
