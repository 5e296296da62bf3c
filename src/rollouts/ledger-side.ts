/**
 * What a server's ledger does for rollouts, as pure functions plus the outbox effect that carries
 * a target's outcome to its Rollout object. The ledger remembers, per agent, the generation a
 * rollout wrote (a "mark"); a report at or past that generation that realizes the agent at the
 * rollout's image (done) or reports an error for it (failed) sends the outcome once; so does an
 * operator's desired config, or the planner's, that takes the agent off that image first
 * (superseded: desiredChangeMarks).
 */
import { catalogSpread, type CatalogFields } from "../domain/images";
import type { Env } from "../env";
import type { DesiredState } from "../model/server/record";
import type { StoredReport } from "../model/server/schemas";
import type { Effect } from "../objects/kit/outbox";
import { lane, rolloutOf } from "../objects/stubs";

export interface ApplyRolloutImage {
  rollout_id: string;
  pass: number;
  agent: string;
  image: string;
  version: string;
  /** The catalog image's fields the agent entry gets; null or absent: a free-form image. */
  catalog?: CatalogFields | null;
  /**
   * The rollout's clock when it last saw the target applying, just before it sent the write:
   * what orders writes of different rollouts of the agent (absent from older code's writes).
   */
  sent_at?: number;
  /**
   * A rollback's write to a server that was no target of the forward pass: it took the rollout's
   * `image` from the fleet's channel while the rollout held it. Written only while the agent still
   * runs that image as the planner gave it at or after `since` (the rollout's start), with no
   * explicit choice since (decideChannelGiven).
   */
  from_channel?: { image: string; version: string; since: number };
}

/** What a ledger knows of who gave its agents their images, beside the marks (decideChannelGiven). */
export interface ImageOrigin {
  /** An operator's PUT pinned the server: its config is theirs, the planner leaves it alone. */
  pinned: boolean;
  /** When the server registered: its first config is the plan of that moment. */
  created_at: number;
}

/**
 * A rollout's write in this ledger, until a report settles it; then kept, `settled`, until another
 * rollout writes the agent: the highest pass taken, so a write of an older pass arriving later
 * still finds it (decideApply) and the host does not go back to the image a rollback left; and
 * when it was sent, so a finished rollout's late write does not undo the next rollout's.
 */
export interface RolloutMark {
  rollout_id: string;
  pass: number;
  generation: number;
  image: string;
  /** Absent in marks written before versions were compared (those settle on the image alone). */
  version?: string;
  from_image: string | null;
  from_version: string | null;
  /** A report settled it: no outcome is owed any more, only the pass is remembered. */
  settled?: true;
  /** The write's `sent_at`: a write of another rollout sent before it is older (decideApply). */
  sent_at?: number;
  /**
   * The write found the agent already at its image and wrote nothing (kept, settled, for its
   * `sent_at` alone; its redelivery is answered `already_at_image` again).
   */
  unchanged?: true;
  /**
   * An operator's desired config, or the planner's, changed the agent's image after this write (or
   * added the agent), at this time of the ledger's: a rollout write sent before it is older than
   * that choice (decideApply). A mark of such a choice alone (no rollout wrote the agent) has an
   * empty `rollout_id`. The name is the stored one, from before the planner's writes were marked.
   */
  operator_at?: number;
  /**
   * That choice was the planner's (the fleet's roles and channels), not an operator's: a rollback
   * may take back an image the rollout's channel move gave (decideChannelGiven).
   */
  planned?: true;
}

/** Who chose a desired config a rollout did not write. */
export type DesiredChooser = "planner" | "operator";

export type ApplyOutcome =
  | { ok: true; outcome: "applied"; generation: number; from_image: string | null; from_version: string | null }
  | { ok: true; outcome: "already_at_image" | "agent_absent" | "removed" | "superseded" | ChannelRefusal };

/**
 * Why a rollback's write for a server that took the rollout's image from the channel writes
 * nothing: an operator set its agent since (`set_by_operator`), its image came another way or
 * before the rollout (`not_from_channel`), or it no longer runs the rollout's image
 * (`not_rollout_image`).
 */
type ChannelRefusal = "set_by_operator" | "not_from_channel" | "not_rollout_image";

/**
 * Whether the agent's image is the one the fleet's channel gave it while the rollout held it: the
 * rollout's image, chosen by the planner at or after the rollout's start (a mark of the planner's,
 * or, with no mark, the plan the server registered with), nothing chosen explicitly since. Null:
 * it is; else why not.
 */
export function decideChannelGiven(
  current: { image: string; version: string },
  mark: RolloutMark | undefined,
  origin: ImageOrigin,
  given: NonNullable<ApplyRolloutImage["from_channel"]>,
): ChannelRefusal | null {
  if (current.image !== given.image || current.version !== given.version) return "not_rollout_image";
  if (origin.pinned) return "set_by_operator";
  if (!mark) return origin.created_at >= given.since ? null : "not_from_channel";
  if (mark.rollout_id !== "") return "not_from_channel";
  if (!mark.planned) return "set_by_operator";
  return (mark.operator_at ?? 0) >= given.since ? null : "not_from_channel";
}

/** The ledger's answer to a rollout's write, as a pure decision over its state. */
export function decideApply(
  desired: DesiredState,
  serverState: string,
  mark: RolloutMark | undefined,
  req: ApplyRolloutImage,
  now: number,
  origin: ImageOrigin = { pinned: false, created_at: 0 },
): { outcome: ApplyOutcome; next?: DesiredState; mark?: RolloutMark } {
  // A redelivery of the same write: the same answer, nothing written again. An older pass's write
  // (a call past its deadline that landed after the rollback's) gets the same: the lane that keeps
  // a rollout's writes in order lets go of a call at its deadline, so the order is kept here too,
  // also once a report settled the newer pass's mark (kept, settled, for that). The answer is ok:
  // a refusal would read as "server removed" to the rollout (src/rollouts/outcomes.ts).
  if (mark && mark.rollout_id === req.rollout_id && mark.pass >= req.pass) {
    if (mark.unchanged) return { outcome: { ok: true, outcome: "already_at_image" } };
    return {
      outcome: {
        ok: true,
        outcome: "applied",
        generation: mark.generation,
        from_image: mark.from_image,
        from_version: mark.from_version,
      },
    };
  }
  const current = desired.agents.find((a) => a.name === req.agent);
  // Another rollout's write sent before the one this ledger holds: the (fleet, agent) claim lets
  // one rollout write at a time and lets go only once none of its targets applies, so this is a
  // finished rollout's call that outlived its deadline and the claim, overtaken by the next
  // rollout's write. The same for any rollout's write sent before an operator's desired config, or
  // the planner's, changed the agent (that choice is the newer one, however late the write arrives).
  // Nothing is written, and the answer says so: the sender may still be waiting on its target (an
  // operator's PUT overtakes a live rollout), and an "applied" at a generation that will never
  // run its image would hold that target until its server timeout. Its target is skipped.
  const older =
    mark !== undefined &&
    ((mark.rollout_id !== req.rollout_id && sentBefore(req.sent_at, mark.sent_at)) ||
      sentBefore(req.sent_at, mark.operator_at));
  if (older) return { outcome: { ok: true, outcome: "superseded" } };
  if (serverState === "decommissioning" || serverState === "removed")
    return { outcome: { ok: true, outcome: "removed" } };
  if (desired.lifecycle !== "run") return { outcome: { ok: true, outcome: "removed" } };
  if (!current) return { outcome: { ok: true, outcome: "agent_absent" } };
  if (req.from_channel) {
    const refused = decideChannelGiven(current, mark, origin, req.from_channel);
    if (refused) return { outcome: { ok: true, outcome: refused } };
  }
  if (
    current.image === req.image &&
    current.version === req.version &&
    (current.image_id ?? null) === (req.catalog?.image_id ?? null)
  ) {
    // Kept as this rollout's mark, so an older rollout's late write cannot take the agent away
    // from the image this one found (a redelivery is answered above and writes nothing). Not in
    // place of a mark still owed an outcome: that rollout's report is still to come.
    const keep = req.sent_at !== undefined && (!mark || mark.settled === true);
    return {
      outcome: { ok: true, outcome: "already_at_image" },
      ...(keep && {
        mark: {
          rollout_id: req.rollout_id,
          pass: req.pass,
          generation: desired.generation,
          image: req.image,
          version: req.version,
          from_image: current.image,
          from_version: current.version,
          settled: true,
          sent_at: req.sent_at,
          unchanged: true,
        },
      }),
    };
  }
  const next: DesiredState = {
    ...desired,
    generation: desired.generation + 1,
    agents: desired.agents.map((a) =>
      a.name === req.agent
        ? {
            name: a.name,
            image: req.image,
            version: req.version,
            instance_id: a.instance_id,
            ...catalogSpread(req.catalog),
          }
        : a,
    ),
    updated_at: now,
  };
  const newMark: RolloutMark = {
    rollout_id: req.rollout_id,
    pass: req.pass,
    generation: next.generation,
    image: req.image,
    version: req.version,
    from_image: current.image,
    from_version: current.version,
    ...(req.sent_at !== undefined && { sent_at: req.sent_at }),
  };
  return {
    outcome: {
      ok: true,
      outcome: "applied",
      generation: next.generation,
      from_image: current.image,
      from_version: current.version,
    },
    next,
    mark: newMark,
  };
}

/**
 * Whether a write was sent before the mark's time: only when both are known (a write of older
 * code is ordered by its arrival, as before). Equal times are not "before": the arrival decides.
 */
const sentBefore = (sent: number | undefined, than: number | undefined) =>
  sent !== undefined && than !== undefined && sent < than;

/**
 * A desired config chosen by someone other than a rollout (`by`: an operator's PUT or a cancelled
 * decommission, or the planner applying the fleet's roles and channels) replaced `before` with
 * `after` at `now`: the marks with each agent whose image it changed (or added) noted, and whose
 * choice it was (`planned`), so a rollout write sent before it is older;
 * an agent no rollout wrote gets a mark of that choice alone, settled (no outcome is owed to
 * anyone). The settled marks of agents `after` no longer has go: a write for such an agent writes
 * nothing (agent_absent), and one brought back is marked afresh, so the marks stay as many as the
 * agents (an operator's stream of new names would otherwise grow them for ever).
 *
 * Only a change of an agent's own image counts. The planner keeps the image of an agent a server
 * runs, whatever its channel says (src/planner/plan.ts), so a rollout's own move of the fleet's
 * channel never changes a target's agent here: a planner write that adds or drops other agents
 * leaves the rollout's marks, and its writes still in flight, alone.
 *
 * A mark still owed an outcome whose image `after` no longer gives its agent (changed, or the
 * agent taken away) is settled here, with a `superseded` event for its rollout: no report will
 * ever show the rollout's image there, and without it the target would hold its place in the
 * rollout until its server timeout, then count as a timeout toward the abort rule. A change that
 * leaves the rollout's image and version (another agent's, or the catalog id alone) settles
 * nothing: the host's report still decides. `marks` null: nothing to store.
 */
export function desiredChangeMarks(
  marks: Readonly<Record<string, RolloutMark>>,
  before: DesiredState,
  after: DesiredState,
  now: number,
  serverId: string,
  by: DesiredChooser,
): { marks: Record<string, RolloutMark> | null; events: RolloutEvent[] } {
  const was = new Map(before.agents.map((a) => [a.name, a]));
  const kept = new Set(after.agents.map((a) => a.name));
  const events: RolloutEvent[] = [];
  let next: Record<string, RolloutMark> | null = null;
  for (const [name, m] of Object.entries(marks)) {
    if (kept.has(name)) continue;
    if (!m.settled) events.push(supersededEvent(m, serverId, now));
    next ??= { ...marks };
    delete next[name];
  }
  for (const a of after.agents) {
    const b = was.get(a.name);
    if (b && b.image === a.image && b.version === a.version && (b.image_id ?? null) === (a.image_id ?? null)) continue;
    next ??= { ...marks };
    const m = marks[a.name];
    if (!m) {
      next[a.name] = {
        rollout_id: "",
        pass: 0,
        generation: after.generation,
        image: a.image,
        version: a.version,
        from_image: b?.image ?? null,
        from_version: b?.version ?? null,
        settled: true,
        operator_at: now,
        ...(by === "planner" && { planned: true as const }),
      };
      continue;
    }
    const owedNoMore = !m.settled && !runsMark(a, m);
    if (owedNoMore) events.push(supersededEvent(m, serverId, now));
    const { planned: _was, ...rest } = m;
    next[a.name] = {
      ...rest,
      operator_at: now,
      ...(owedNoMore && { settled: true as const }),
      ...(by === "planner" && { planned: true as const }),
    };
  }
  return { marks: next, events };
}

/** Whether an agent entry is the mark's image, as a report realizing the mark must show it (settleMarks). */
const runsMark = (a: { image: string; version: string }, m: RolloutMark) =>
  a.image === m.image && (m.version === undefined || a.version === m.version);

const supersededEvent = (m: RolloutMark, serverId: string, now: number): RolloutEvent => ({
  rollout_id: m.rollout_id,
  pass: m.pass,
  server_id: serverId,
  generation: m.generation,
  outcome: "superseded",
  at: now,
});

export interface RolloutEvent {
  rollout_id: string;
  pass: number;
  server_id: string;
  generation: number;
  /**
   * `superseded`: an operator's desired config, or the planner's, took the agent off the image
   * before a report showed it.
   */
  outcome: "realized" | "failed" | "removed" | "superseded";
  message?: string;
  at: number;
}

/**
 * What a report settles: for each mark, `realized` when the report is at or past the mark's
 * generation and shows the agent running the rollout's image without an error, `failed` when it
 * carries an error for the agent at that point. Marks the report does not settle stay.
 */
export function settleMarks(
  marks: Record<string, RolloutMark>,
  report: StoredReport,
  serverId: string,
): { events: RolloutEvent[]; remaining: Record<string, RolloutMark> } {
  const events: RolloutEvent[] = [];
  const remaining: Record<string, RolloutMark> = {};
  for (const [agent, m] of Object.entries(marks)) {
    if (m.settled || report.generation < m.generation) {
      remaining[agent] = m;
      continue;
    }
    const errors = report.errors.filter((e) => e.agent === agent);
    const seen = report.agents.find((a) => a.name === agent);
    const base = {
      rollout_id: m.rollout_id,
      pass: m.pass,
      server_id: serverId,
      generation: m.generation,
      at: report.received_at,
    };
    // Kept in the turn's one write of the marks (a put where a delete was): no storage row more.
    const settled = () => (remaining[agent] = { ...m, settled: true });
    if (errors.length > 0) {
      settled();
      events.push({
        ...base,
        outcome: "failed",
        message: errors
          .map((e) => `${e.op}: ${e.message}`)
          .join("; ")
          .slice(0, 500),
      });
    } else if (
      seen &&
      seen.image === m.image &&
      (m.version === undefined || seen.version === m.version) &&
      seen.state === "running"
    ) {
      settled();
      events.push({ ...base, outcome: "realized" });
    } else {
      remaining[agent] = m;
    }
  }
  return { events, remaining };
}

/** Delivered to the rollout, which ignores what does not match its target (duplicates, late events). */
export const rolloutEventEffect = (env: () => Env): Effect => ({
  target: "call",
  lane: (e: RolloutEvent) => lane.rollout(e.rollout_id),
  deliver: async (e: RolloutEvent) => {
    await rolloutOf(env(), e.rollout_id).targetEvent(e);
  },
});
