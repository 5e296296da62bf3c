import { describe, expect, it } from "vitest";
import { MAX_QUEUED_PER_GROUP } from "../src/domain/limits";
import { admit, drain, nextWake, releaseUnclaimed, UNCLAIMED_GRANT_S, type Queue } from "../src/fleetlock/queue";
import { configure, newGroup, type GroupState } from "../src/fleetlock/semaphore";

const T0 = Date.UTC(2026, 10, 23, 12, 0, 30); // Monday 12:00:30 UTC

function full(slots: number, wait = 30): GroupState {
  let g = configure(newGroup(slots, T0), { slots, queue_wait_s: wait }, T0);
  for (let i = 0; i < slots; i++)
    g = { ...g, holders: [...g.holders, { id: `h${i}`, server_id: null, granted_at: T0 }] };
  return g;
}

function parkAll(g: GroupState, ids: string[], at = T0): Queue {
  let q: Queue = [];
  for (const id of ids) {
    const a = admit(g, q, id, null, at, { mayPark: true });
    if (a.kind !== "parked") throw new Error(`${id}: ${a.kind}`);
    q = a.queue;
  }
  return q;
}

describe("queue state", () => {
  it("parks in arrival order, holds one place per id, and refuses when the group allows no wait", () => {
    const g = full(1);
    const q = parkAll(g, ["a", "b", "c"]);
    expect(q.map((e) => [e.id, e.deadline - e.since])).toEqual([
      ["a", 30_000],
      ["b", 30_000],
      ["c", 30_000],
    ]);
    const again = admit(g, q, "b", null, T0 + 5, { mayPark: true });
    expect(again).toMatchObject({ kind: "parked", changed: false, entry: { id: "b", since: T0 } });
    expect(admit(full(1, 0), [], "x", null, T0, { mayPark: true })).toMatchObject({
      kind: "refused",
      refusal: "semaphore_full",
    });
    expect(admit(g, [], "x", null, T0, { mayPark: false })).toMatchObject({
      kind: "refused",
      refusal: "semaphore_full",
    });
  });

  it(`refuses instead of parking once ${MAX_QUEUED_PER_GROUP} hosts wait in the group`, () => {
    const g = full(1);
    const q: Queue = Array.from({ length: MAX_QUEUED_PER_GROUP }, (_, i) => ({
      id: `q${i}`,
      server_id: null,
      since: T0,
      deadline: T0 + 30_000,
      seq: i + 1,
    }));
    expect(admit(g, q, "late", null, T0, { mayPark: true })).toMatchObject({
      kind: "refused",
      refusal: "semaphore_full",
    });
    expect(admit(g, q.slice(1), "late", null, T0, { mayPark: true })).toMatchObject({ kind: "parked" });
  });

  it("never parks on a paused group", () => {
    const g = configure(full(1), { slots: 1, paused: true }, T0);
    expect(admit(g, [], "x", null, T0, { mayPark: true })).toMatchObject({ kind: "refused", refusal: "group_paused" });
  });

  it("makes a newcomer queue behind parked hosts even when a slot is free", () => {
    const g = full(1);
    const q = parkAll(g, ["a"]);
    const freed = { ...g, holders: [] };
    expect(admit(freed, q, "z", null, T0, { mayPark: true })).toMatchObject({ kind: "parked" });
    expect(admit(freed, q, "z", null, T0, { mayPark: false })).toMatchObject({ kind: "refused" });
  });

  it("drains free slots to the longest-waiting first, marking grants nobody can answer as unclaimed", () => {
    const g = full(2);
    const q = parkAll(g, ["a", "b", "c"]);
    const freed = { ...g, holders: [] };
    const d = drain(freed, q, T0 + 10, (id) => id !== "b");
    expect(d.granted.map((x) => [x.entry.id, x.answerable])).toEqual([
      ["a", true],
      ["b", false],
    ]);
    expect(d.group.holders).toEqual([
      { id: "a", server_id: null, granted_at: T0 + 10 },
      { id: "b", server_id: null, granted_at: T0 + 10, unclaimed_until: T0 + 10 + UNCLAIMED_GRANT_S * 1000 },
    ]);
    expect(d.queue.map((e) => e.id)).toEqual(["c"]);
  });

  it("grants nothing while paused or outside every window, and drops entries whose wait ran out", () => {
    const q = parkAll(full(1), ["a", "b"]);
    const paused = configure({ ...full(1), holders: [] }, { slots: 1, paused: true }, T0);
    expect(drain(paused, q, T0, () => true).granted).toEqual([]);
    const w = [{ days: ["Tue" as const], start_time: "00:00", length_minutes: 60, time_zone: "UTC" }];
    const closed = configure({ ...full(1), holders: [] }, { slots: 1, windows: w }, T0);
    expect(drain(closed, q, T0, () => true).granted).toEqual([]);
    const late = drain({ ...full(1), holders: [] }, q, T0 + 30_000, () => true);
    expect(late.granted).toEqual([]);
    expect(late.queue).toEqual([]);
  });

  it("releases unclaimed grants at their bound, not before", () => {
    const g: GroupState = {
      ...full(1),
      holders: [{ id: "a", server_id: null, granted_at: T0, unclaimed_until: T0 + 1000 }],
    };
    expect(releaseUnclaimed(g, T0 + 999).released).toEqual([]);
    expect(releaseUnclaimed(g, T0 + 1000).released.map((h) => h.id)).toEqual(["a"]);
  });

  it("wakes at the earliest deadline, unclaimed bound, or — outside a window with a free slot — the next minute", () => {
    const q = parkAll(full(1), ["a"]);
    expect(nextWake(full(1), q, T0)).toBe(T0 + 30_000);
    const w = [{ days: ["Tue" as const], start_time: "00:00", length_minutes: 60, time_zone: "UTC" }];
    const closed = configure({ ...full(1), holders: [] }, { slots: 1, windows: w }, T0);
    expect(nextWake(closed, q, T0)).toBe(Date.UTC(2026, 10, 23, 12, 1));
    const unclaimed: GroupState = {
      ...full(1),
      holders: [{ id: "x", server_id: null, granted_at: T0, unclaimed_until: T0 + 5 }],
    };
    expect(nextWake(unclaimed, q, T0)).toBe(T0 + 5);
    expect(nextWake(full(1), [], T0)).toBeNull();
  });
});
