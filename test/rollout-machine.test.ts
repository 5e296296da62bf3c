import { describe, expect, it } from "vitest";
import { abortReason } from "../src/rollouts/abort";
import { control } from "../src/rollouts/controls";
import {
  account,
  channelTargetsFound,
  finish,
  newCore,
  quiescent,
  startable,
  stepTarget,
  zeroCounts,
  type Core,
  type Target,
  type TargetEvent,
} from "../src/rollouts/machine";
import { etaSeconds, isSlow, median } from "../src/rollouts/progress";
import {
  decideApply,
  decideChannelGiven,
  desiredChangeMarks,
  settleMarks,
  type RolloutMark,
} from "../src/rollouts/ledger-side";
import type { StoredReport } from "../src/model/server/schemas";
import type { DesiredState } from "../src/model/server/record";

const T = (over: Partial<Target> = {}): Target => ({
  pass: 0,
  server_id: "s1",
  seq: 0,
  hostname: "h1",
  reboot_group: "default",
  state: "queued",
  image: "img:2",
  version: "2",
  from_image: null,
  from_version: null,
  generation: null,
  slot: "none",
  started_at: null,
  ended_at: null,
  reason: null,
  warned: false,
  ...over,
});
const core = (over: Partial<Core> = {}, counts: Partial<Core["counts"]> = {}): Core => ({
  ...newCore(),
  ...over,
  counts: { ...zeroCounts(), ...counts },
});

describe("target transitions", () => {
  const applying = T({ state: "applying", started_at: 1, generation: 5 });
  const cases: [string, Target, TargetEvent, Partial<Target> | null][] = [
    ["queued starts", T(), { type: "start", at: 10 }, { state: "applying", started_at: 10 }],
    ["a slot request marks it", T(), { type: "slot_requested" }, { slot: "requested", state: "queued" }],
    [
      "a granted slot starts it holding the slot",
      T({ slot: "requested" }),
      { type: "start", at: 3 },
      { state: "applying", slot: "held" },
    ],
    ["a refused slot puts it back", T({ slot: "requested" }), { type: "slot_refused" }, { slot: "none" }],
    [
      "applied records the generation and the image before",
      T({ state: "applying" }),
      { type: "applied", generation: 7, from_image: "img:1", from_version: "1" },
      { generation: 7, from_image: "img:1" },
    ],
    [
      "a second applied changes nothing",
      applying,
      { type: "applied", generation: 5, from_image: null, from_version: null },
      null,
    ],
    [
      "realized at the written generation is done",
      applying,
      { type: "realized", generation: 5, at: 9 },
      { state: "done", ended_at: 9 },
    ],
    ["realized at another generation changes nothing", applying, { type: "realized", generation: 4, at: 9 }, null],
    [
      "realized on a done target changes nothing (duplicate)",
      T({ state: "done", generation: 5 }),
      { type: "realized", generation: 5, at: 9 },
      null,
    ],
    [
      "failed after done changes nothing (reordered)",
      T({ state: "done", generation: 5 }),
      { type: "failed", generation: 5, message: "x", at: 9 },
      null,
    ],
    [
      "failed at the written generation",
      applying,
      { type: "failed", generation: 5, message: "pull", at: 9 },
      { state: "failed", reason: "pull" },
    ],
    ["timeout ends an applying target", applying, { type: "timeout", at: 9 }, { state: "timed_out" }],
    ["timeout of a done target changes nothing", T({ state: "done" }), { type: "timeout", at: 9 }, null],
    [
      "already at the image: skipped",
      T({ state: "applying" }),
      { type: "skip", reason: "already_at_image", at: 2 },
      { state: "skipped", reason: "already_at_image" },
    ],
    ["skip after a write changes nothing", applying, { type: "skip", reason: "x", at: 2 }, null],
    [
      "a skip naming the generation written ends it (the ledger knows it will never run)",
      applying,
      { type: "skip", reason: "superseded", generation: 5, at: 2 },
      { state: "skipped", reason: "superseded", ended_at: 2 },
    ],
    [
      "a skip naming another generation changes nothing",
      applying,
      { type: "skip", reason: "superseded", generation: 4, at: 2 },
      null,
    ],
    [
      "a skip naming its generation once the target ended changes nothing",
      T({ state: "done", generation: 5 }),
      { type: "skip", reason: "superseded", generation: 5, at: 2 },
      null,
    ],
    ["removed leaves the rollout", applying, { type: "removed", at: 2 }, { state: "skipped", reason: "removed" }],
    ["start of an applying target changes nothing", applying, { type: "start", at: 2 }, null],
  ];
  it.each(cases)("%s", (_name, t, e, expected) => {
    const after = stepTarget(t, e);
    if (expected === null) expect(after).toBeNull();
    else expect(after).toMatchObject(expected);
  });
});

describe("concurrency", () => {
  it.each([
    ["nothing in flight", core({}, { queued: 10 }), 3, 3],
    ["two applying", core({}, { queued: 10, applying: 2 }), 3, 1],
    ["full", core({}, { applying: 3 }), 3, 0],
    ["slot requests count", core({ slot_requests: 2 }, { applying: 1 }), 3, 0],
    ["previous pass in flight counts", core({ prev_applying: 2, state: "rolling_back" }, { queued: 5 }), 3, 1],
    ["paused starts nothing", core({ state: "paused" }, { queued: 5 }), 3, 0],
    ["failed starts nothing", core({ state: "failed" }, { queued: 5 }), 3, 0],
  ] as const)("%s", (_n, c, concurrency, expected) => {
    expect(startable(c, { concurrency })).toBe(expected);
  });
});

describe("abort rule", () => {
  it.each([
    ["max_failures 0: the first failure aborts", { failed: 1 }, { max_failures: 0 }, true],
    ["max_failures 1: one failure does not", { failed: 1, done: 3 }, { max_failures: 1 }, false],
    ["max_failures 1: a failure and a timeout do", { failed: 1, timed_out: 1 }, { max_failures: 1 }, true],
    [
      "percent before min_completed does not",
      { failed: 2, done: 0 },
      { max_failure_percent: 10, min_completed: 5 },
      false,
    ],
    ["percent after min_completed does", { failed: 2, done: 3 }, { max_failure_percent: 10, min_completed: 5 }, true],
    ["percent at the limit does not", { failed: 1, done: 9 }, { max_failure_percent: 10, min_completed: 5 }, false],
    ["skipped targets do not count", { failed: 1, done: 9, skipped: 50 }, { max_failure_percent: 10 }, false],
    ["no rule never aborts", { failed: 100 }, {}, false],
  ] as const)("%s", (_n, counts, rule, aborts) => {
    expect(abortReason({ ...zeroCounts(), ...counts }, rule) !== null).toBe(aborts);
  });

  it("a failure over the threshold fails the rollout and skips what is queued; one applying keeps running", () => {
    const before = T({ state: "applying", generation: 3 });
    const after = stepTarget(before, { type: "failed", generation: 3, message: "x", at: 5 })!;
    const out = account(core({}, { applying: 2, queued: 4 }), { abort: { max_failures: 0 } }, before, after, 5);
    expect(out.core.state).toBe("failed");
    expect(out.skipQueued).toBe("aborted");
    expect(out.entered).toBe("failed");
    expect(out.core.counts.applying).toBe(1);
    expect(quiescent(out.core)).toBe(false);
  });

  it("the last target done ends the pass: running → succeeded, rolling_back → rolled_back", () => {
    const before = T({ state: "applying", generation: 3 });
    const after = stepTarget(before, { type: "realized", generation: 3, at: 5 })!;
    expect(account(core({}, { applying: 1, done: 2 }), { abort: {} }, before, after, 5).core.state).toBe("succeeded");
    expect(
      account(
        core({ state: "rolling_back", pass: 1 }, { applying: 1 }),
        { abort: {} },
        { ...before, pass: 1 },
        { ...after, pass: 1 },
        5,
      ).core.state,
    ).toBe("rolled_back");
  });

  it("a forward target ending during the rollback frees its place without touching the rollback's counts", () => {
    const before = T({ state: "applying", generation: 3 });
    const after = stepTarget(before, { type: "failed", generation: 3, message: "x", at: 5 })!;
    const out = account(
      core({ state: "rolling_back", pass: 1, prev_applying: 1 }, { queued: 1 }),
      { abort: { max_failures: 0 } },
      before,
      after,
      5,
    );
    expect(out.core).toMatchObject({ state: "rolling_back", prev_applying: 0, counts: { queued: 1, failed: 0 } });
  });
});

describe("operator controls", () => {
  it.each([
    ["pause a running rollout", core(), "pause", "paused"],
    ["resume a paused one", core({ state: "paused", paused_from: "running" }, { queued: 1 }), "resume", "running"],
    [
      "resume a paused rollback",
      core({ state: "paused", paused_from: "rolling_back", pass: 1 }, { queued: 1 }),
      "resume",
      "rolling_back",
    ],
    [
      "resume with nothing left finishes",
      core({ state: "paused", paused_from: "running" }, { done: 3 }),
      "resume",
      "succeeded",
    ],
    ["cancel a running one", core({}, { queued: 3 }), "cancel", "cancelled"],
    ["cancel a paused one", core({ state: "paused", paused_from: "running" }), "cancel", "cancelled"],
    ["roll back a succeeded one", core({ state: "succeeded" }, { done: 3 }), "rollback", "rolling_back"],
    ["roll back a failed one", core({ state: "failed" }, { done: 3, failed: 1 }), "rollback", "rolling_back"],
    ["roll back a running one", core({}, { done: 1, applying: 2 }), "rollback", "rolling_back"],
    ["roll back a cancelled one", core({ state: "cancelled" }), "rollback", "rolling_back"],
  ] as const)("%s", (_n, c, action, state) => {
    const out = control(c, action, 1);
    expect(out.ok && out.core.state).toBe(state);
  });

  it.each([
    ["resume a running rollout", core(), "resume"],
    ["pause a succeeded one", core({ state: "succeeded" }), "pause"],
    ["cancel a succeeded one", core({ state: "succeeded" }), "cancel"],
    ["roll back a rolled-back one", core({ state: "rolled_back", pass: 1 }), "rollback"],
    ["roll back a rolling-back one", core({ state: "rolling_back", pass: 1 }), "rollback"],
    ["roll back a paused rollback", core({ state: "paused", paused_from: "rolling_back", pass: 1 }), "rollback"],
  ] as const)("refused: %s", (_n, c, action) => {
    const out = control(c, action, 1);
    expect(out.ok).toBe(false);
  });

  it("rollback starts pass 1 with the forward targets still applying counted as in flight", () => {
    const out = control(core({}, { applying: 2, done: 3, queued: 4 }), "rollback", 1);
    expect(out.ok && out.core).toMatchObject({ pass: 1, prev_applying: 2 });
    expect(out.ok && out.skipQueued).toBe("rolled_back");
  });
});

describe("progress", () => {
  it("median, slow servers and ETA", () => {
    expect(median([])).toBeNull();
    expect(median([1, 2, 9])).toBe(2);
    expect(median([1, 2, 4, 9])).toBe(3);
    expect(isSlow(31, 10, 3)).toBe(true);
    expect(isSlow(30, 10, 3)).toBe(false);
    expect(isSlow(1000, 10, null)).toBe(false);
    expect(isSlow(1000, null, 3)).toBe(false);
    expect(etaSeconds(core({}, { queued: 8, applying: 2 }), 5, 2000)).toBe(4);
    expect(etaSeconds(core({}, { queued: 8 }), 5, null)).toBeNull();
    expect(etaSeconds(core({ state: "succeeded" }), 5, null)).toBe(0);
  });
});

describe("the ledger's side", () => {
  const mark: RolloutMark = {
    rollout_id: "r1",
    pass: 0,
    generation: 5,
    image: "img:2",
    from_image: "img:1",
    from_version: "1",
  };
  const report = (generation: number, image: string, error = false): StoredReport => ({
    generation,
    reconciled_at: "2026-01-01T00:00:00Z",
    boot_id: "b",
    agents: [{ name: "fw", image, version: "x", instance_id: "i", state: "running" }],
    errors: error ? [{ agent: "fw", op: "update", message: "pull failed" }] : [],
    assignments: { units: [], storage: [] },
    received_at: 1,
  });
  it.each([
    ["a report behind the written generation settles nothing, even with an old error", report(4, "img:1", true), null],
    ["at the generation, running the image: realized", report(5, "img:2"), "realized"],
    ["past the generation, running the image: realized", report(6, "img:2"), "realized"],
    ["at the generation with an error for the agent: failed", report(5, "img:1", true), "failed"],
    ["at the generation, another image, no error: not yet", report(5, "img:1"), null],
  ] as const)("%s", (_n, r, outcome) => {
    const { events, remaining } = settleMarks({ fw: mark }, r, "s1");
    expect(events.map((e) => e.outcome)).toEqual(outcome ? [outcome] : []);
    // A settled mark stays, marked settled (the pass it took), and owes no outcome again.
    expect(remaining).toEqual({ fw: outcome ? { ...mark, settled: true } : mark });
    expect(settleMarks(remaining, r, "s1").events).toEqual([]);
  });

  it("a mark that names its version settles only on that version, whatever the image string (a catalog image keeps its name)", () => {
    const versioned: RolloutMark = { ...mark, image: "img", version: "2" };
    const at = (version: string): StoredReport => ({
      ...report(5, "img"),
      agents: [{ name: "fw", image: "img", version, instance_id: "i", state: "running" }],
    });
    expect(settleMarks({ fw: versioned }, at("1"), "s1").events).toEqual([]);
    expect(settleMarks({ fw: versioned }, at("2"), "s1").events.map((e) => e.outcome)).toEqual(["realized"]);
  });

  describe("an operator's desired config replacing the rollout's", () => {
    const written = (agents: DesiredState["agents"], generation = 5): DesiredState => ({
      generation,
      agents,
      lifecycle: "run",
      updated_at: 0,
    });
    const fw = { name: "fw", image: "img:2", version: "2", instance_id: "i" };
    const logs = { name: "logs", image: "logs:1", version: "1", instance_id: "l" };
    const owed: RolloutMark = { ...mark, version: "2" };
    const before = written([fw, logs]);
    it.each([
      ["another image for the agent: superseded", [{ ...fw, image: "img:9", version: "9" }, logs], true],
      ["another version of the same image name: superseded", [{ ...fw, version: "3" }, logs], true],
      ["the agent taken away: superseded, its mark gone", [logs], true],
      ["another agent changed: still owed", [fw, { ...logs, image: "logs:2" }], false],
      [
        "the catalog id alone changed: still owed (the host still runs the rollout's image)",
        [{ ...fw, image_id: "c" }, logs],
        false,
      ],
    ] as const)("%s", (_n, agents, superseded) => {
      const out = desiredChangeMarks({ fw: owed }, before, written([...agents], 6), 7, "s1", "operator");
      expect(out.events).toEqual(
        superseded ? [{ rollout_id: "r1", pass: 0, server_id: "s1", generation: 5, outcome: "superseded", at: 7 }] : [],
      );
      const kept = out.marks?.fw ?? owed;
      if (superseded && agents.some((a) => a.name === "fw"))
        expect(kept).toMatchObject({ settled: true, operator_at: 7 });
      if (superseded && !agents.some((a) => a.name === "fw")) expect(out.marks).not.toHaveProperty("fw");
      if (!superseded) expect(kept.settled).toBeUndefined();
    });
    it("a config that keeps every image and drops only unmarked agents stores no marks", () => {
      // The planner's re-plans go through here: a role change that adds nothing the rollouts
      // care about must not cost the ledger a marks write.
      expect(desiredChangeMarks({ fw: owed }, before, written([fw], 6), 7, "s1", "operator")).toEqual({
        marks: null,
        events: [],
      });
      expect(
        desiredChangeMarks({}, before, written([{ ...fw, instance_id: "j" }, logs], 6), 7, "s1", "operator").marks,
      ).toBeNull();
    });
    it("an agent added gets a settled mark of that choice alone, owed to no rollout", () => {
      const out = desiredChangeMarks({ fw: owed }, written([fw]), written([fw, logs], 6), 7, "s1", "operator");
      expect(out.events).toEqual([]);
      expect(out.marks).toEqual({
        fw: owed,
        logs: {
          rollout_id: "",
          pass: 0,
          generation: 6,
          image: "logs:1",
          version: "1",
          from_image: null,
          from_version: null,
          settled: true,
          operator_at: 7,
        },
      });
    });
    it("a mark a report settled owes nothing: no event, only the operator's time", () => {
      const done: RolloutMark = { ...owed, settled: true };
      const out = desiredChangeMarks(
        { fw: done },
        before,
        written([{ ...fw, image: "img:9" }, logs], 6),
        7,
        "s1",
        "operator",
      );
      expect(out.events).toEqual([]);
      expect(out.marks?.fw).toEqual({ ...done, operator_at: 7 });
    });
  });

  const desired = {
    generation: 4,
    agents: [{ name: "fw", image: "img:1", version: "1", instance_id: "i" }],
    lifecycle: "run" as const,
    updated_at: 0,
  };
  const req = { rollout_id: "r1", pass: 0, agent: "fw", image: "img:2", version: "2" };
  it.each([
    ["writes the next generation with the agent's image changed", desired, "active", undefined, "applied"],
    ["a redelivery answers the same generation and writes nothing", desired, "active", mark, "applied"],
    [
      "already at the image",
      { ...desired, agents: [{ ...desired.agents[0], image: "img:2", version: "2" }] },
      "active",
      undefined,
      "already_at_image",
    ],
    ["no such agent", { ...desired, agents: [] }, "active", undefined, "agent_absent"],
    ["a decommissioning server", desired, "decommissioning", undefined, "removed"],
  ] as const)("%s", (_n, d, state, m, outcome) => {
    const out = decideApply(d as DesiredState, state, m, req, 9);
    expect(out.outcome.outcome).toBe(outcome);
    if (outcome === "applied" && !m)
      expect(out.next).toMatchObject({ generation: 5, agents: [{ image: "img:2", instance_id: "i" }] });
    if (m) expect(out.next).toBeUndefined();
  });
});

describe("a rollback's servers from the channel", () => {
  const given = { image: "img:2", version: "2", since: 100 };
  const planned: RolloutMark = {
    rollout_id: "",
    pass: 0,
    generation: 3,
    image: "img:2",
    version: "2",
    from_image: null,
    from_version: null,
    settled: true,
    operator_at: 150,
    planned: true,
  };
  const planner = { pinned: false, created_at: 10 };
  it.each([
    [
      "the planner gave it the image since the rollout started",
      { image: "img:2", version: "2" },
      planned,
      planner,
      null,
    ],
    [
      "registered since the rollout started (its first plan, no mark)",
      { image: "img:2", version: "2" },
      undefined,
      { pinned: false, created_at: 120 },
      null,
    ],
    ["registered before the rollout started", { image: "img:2", version: "2" }, undefined, planner, "not_from_channel"],
    [
      "planned before the rollout started",
      { image: "img:2", version: "2" },
      { ...planned, operator_at: 50 },
      planner,
      "not_from_channel",
    ],
    [
      "an operator's PUT wrote the image",
      { image: "img:2", version: "2" },
      { ...planned, planned: undefined },
      planner,
      "set_by_operator",
    ],
    [
      "the server is pinned by an operator's PUT",
      { image: "img:2", version: "2" },
      planned,
      { pinned: true, created_at: 120 },
      "set_by_operator",
    ],
    [
      "a rollout wrote the image",
      { image: "img:2", version: "2" },
      { ...planned, rollout_id: "r0", planned: undefined },
      planner,
      "not_from_channel",
    ],
    ["another image now", { image: "img:3", version: "3" }, planned, planner, "not_rollout_image"],
    ["another version of the image now", { image: "img:2", version: "2b" }, planned, planner, "not_rollout_image"],
  ] as const)("%s", (_n, current, mark, origin, expected) => {
    expect(decideChannelGiven(current, mark as RolloutMark | undefined, origin, given)).toBe(expected);
  });
  it("the planner's choice is marked planned, an operator's afterwards is not", () => {
    const before: DesiredState = { generation: 1, agents: [], lifecycle: "run", updated_at: 0 };
    const after: DesiredState = {
      generation: 2,
      agents: [{ name: "fw", image: "img:2", version: "2", instance_id: "i" }],
      lifecycle: "run",
      updated_at: 0,
    };
    const byPlanner = desiredChangeMarks({}, before, after, 7, "s1", "planner").marks!;
    expect(byPlanner.fw).toMatchObject({ planned: true, operator_at: 7 });
    const again: DesiredState = { ...after, generation: 3, agents: [{ ...after.agents[0], image: "img:3" }] };
    const byOperator = desiredChangeMarks(byPlanner, after, again, 9, "s1", "operator").marks!;
    expect(byOperator.fw.planned).toBeUndefined();
    expect(byOperator.fw.operator_at).toBe(9);
  });
  it("a rollback's write to such a server writes only while the image is the channel's", () => {
    const desired: DesiredState = {
      generation: 3,
      agents: [{ name: "fw", image: "img:2", version: "2", instance_id: "i" }],
      lifecycle: "run",
      updated_at: 0,
    };
    const req = {
      rollout_id: "r1",
      pass: 1,
      agent: "fw",
      image: "img:1",
      version: "1",
      sent_at: 200,
      from_channel: given,
    };
    expect(decideApply(desired, "active", planned, req, 300, planner).outcome).toMatchObject({
      outcome: "applied",
      generation: 4,
      from_image: "img:2",
    });
    expect(decideApply(desired, "active", planned, req, 300, { pinned: true, created_at: 10 }).outcome).toEqual({
      ok: true,
      outcome: "set_by_operator",
    });
  });
  it("the pass waits for the lookup, and ends once it came back with nothing to add", () => {
    const core: Core = { ...newCore(), state: "rolling_back", pass: 1, channel_lookup: true };
    // Nothing queued or in flight, but the lookup still owed: not over yet.
    expect(finish(core, 5)).toEqual({ core });
    expect(channelTargetsFound(core, 0, 5)).toMatchObject({ core: { state: "rolled_back" }, entered: "rolled_back" });
    const out = channelTargetsFound(core, 2, 5);
    expect(out.entered).toBeUndefined();
    expect(out.core.counts.queued).toBe(2);
    expect(out.core.channel_lookup).toBeUndefined();
  });
});
