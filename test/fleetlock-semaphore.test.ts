import { describe, expect, it } from "vitest";
import {
  acquire,
  configure,
  isStuck,
  newGroup,
  release,
  releaseWhere,
  renameHolder,
  type GroupState,
} from "../src/fleetlock/semaphore";
import { localMinuteOfWeek, windowOpen, withinWindows, type MaintenanceWindow } from "../src/model/windows";

const T0 = Date.UTC(2026, 10, 23, 12, 0); // Monday 2026-11-23 12:00 UTC

function grant(g: GroupState, id: string, now = T0) {
  const r = acquire(g, id, `srv-${id}`, now);
  if (!r.ok) throw new Error(`${id}: ${r.kind}`);
  return r.group;
}

describe("semaphore state machine", () => {
  it("grants up to the slot count, then refuses with semaphore_full", () => {
    let g = newGroup(2, T0);
    g = grant(g, "a");
    g = grant(g, "b");
    const r = acquire(g, "c", null, T0);
    expect(r).toMatchObject({ ok: false, kind: "semaphore_full" });
    expect(g.holders.map((h) => h.id)).toEqual(["a", "b"]);
  });

  it("is recursive: a holder acquiring again succeeds without a change, even when full, paused or outside windows", () => {
    let g = grant(newGroup(1, T0), "a");
    g = configure(
      g,
      {
        slots: 1,
        paused: true,
        windows: [{ days: ["Sun"], start_time: "00:00", length_minutes: 1, time_zone: "UTC" }],
      },
      T0,
    );
    const r = acquire(g, "a", "srv-a", T0 + 5000);
    expect(r).toMatchObject({ ok: true, changed: false });
    if (r.ok) expect(r.granted.granted_at).toBe(T0);
  });

  it("releases only what is held and treats unbalanced releases as no-ops", () => {
    const g = grant(newGroup(1, T0), "a");
    expect(release(g, "b", T0).released).toBeNull();
    expect(release(g, "b", T0).group).toBe(g);
    const once = release(g, "a", T0);
    expect(once.released?.id).toBe("a");
    expect(release(once.group, "a", T0).released).toBeNull();
  });

  it("keeps grant order and gives a freed slot to the next requester", () => {
    let g = grant(grant(newGroup(2, T0), "a"), "b");
    g = release(g, "a", T0).group;
    g = grant(g, "c");
    expect(g.holders.map((h) => h.id)).toEqual(["b", "c"]);
  });

  it("never evicts on shrink, and admits again only once holders drop below the new count", () => {
    let g = grant(grant(grant(newGroup(3, T0), "a"), "b"), "c");
    g = configure(g, { slots: 1 }, T0);
    expect(g.holders).toHaveLength(3);
    expect(acquire(g, "d", null, T0)).toMatchObject({ ok: false, kind: "semaphore_full" });
    g = release(release(g, "a", T0).group, "b", T0).group;
    expect(acquire(g, "d", null, T0)).toMatchObject({ ok: false, kind: "semaphore_full" });
    g = release(g, "c", T0).group;
    expect(acquire(g, "d", null, T0)).toMatchObject({ ok: true, changed: true });
  });

  it("grows live: a larger count admits at once", () => {
    let g = grant(newGroup(1, T0), "a");
    expect(acquire(g, "b", null, T0).ok).toBe(false);
    g = configure(g, { slots: 2 }, T0);
    expect(acquire(g, "b", null, T0).ok).toBe(true);
  });

  it("keeps pause and windows when a change omits them", () => {
    const w: MaintenanceWindow = { days: ["Mon"], start_time: "00:00", length_minutes: 60, time_zone: "UTC" };
    let g = configure(null, { slots: 1, paused: true, windows: [w] }, T0);
    g = configure(g, { slots: 4 }, T0);
    expect(g).toMatchObject({ slots: 4, paused: true, windows: [w] });
  });

  it("refuses with group_paused before anything else", () => {
    const g = configure(null, { slots: 0, paused: true }, T0);
    expect(acquire(g, "a", null, T0)).toMatchObject({ ok: false, kind: "group_paused" });
  });

  it("releases by predicate and renames a holder without losing its slot", () => {
    let g = grant(grant(newGroup(3, T0), "a"), "b", T0 + 10);
    const r = releaseWhere(g, (h) => h.server_id === "srv-a", T0);
    expect(r.released.map((h) => h.id)).toEqual(["a"]);
    g = renameHolder(r.group, "b", "b2", T0);
    expect(g.holders).toEqual([{ id: "b2", server_id: "srv-b", granted_at: T0 + 10 }]);
  });

  it("flags a holder stuck only once it has held longer than the TTL", () => {
    const h = { id: "a", server_id: null, granted_at: T0 };
    expect(isStuck(h, T0 + 60_000, 60_000)).toBe(false);
    expect(isStuck(h, T0 + 60_001, 60_000)).toBe(true);
  });
});

describe("maintenance windows", () => {
  const at = (iso: string) => Date.parse(iso);

  it("computes the local minute of the week in the window's time zone", () => {
    // 2026-11-23 is a Monday. 00:30 UTC is still Sunday 19:30 in New York (UTC-5 in November).
    expect(localMinuteOfWeek(at("2026-11-23T00:30:00Z"), "UTC")).toBe(30);
    expect(localMinuteOfWeek(at("2026-11-23T00:30:00Z"), "America/New_York")).toBe(6 * 1440 + 19 * 60 + 30);
    expect(localMinuteOfWeek(at("2026-11-23T00:30:00Z"), "Asia/Kolkata")).toBe(6 * 60);
  });

  it("opens at the start minute and closes at start + length (end exclusive)", () => {
    const w: MaintenanceWindow = { days: ["Wed"], start_time: "01:00", length_minutes: 30, time_zone: "UTC" };
    expect(windowOpen(w, at("2026-11-25T00:59:59Z"))).toBe(false);
    expect(windowOpen(w, at("2026-11-25T01:00:00Z"))).toBe(true);
    expect(windowOpen(w, at("2026-11-25T01:29:59Z"))).toBe(true);
    expect(windowOpen(w, at("2026-11-25T01:30:00Z"))).toBe(false);
  });

  it("runs past midnight into the next day, and past Sunday into Monday", () => {
    const w: MaintenanceWindow = { days: ["Sun"], start_time: "23:30", length_minutes: 60, time_zone: "UTC" };
    expect(windowOpen(w, at("2026-11-29T23:29:00Z"))).toBe(false); // Sunday 23:29
    expect(windowOpen(w, at("2026-11-29T23:45:00Z"))).toBe(true); // Sunday 23:45
    expect(windowOpen(w, at("2026-11-30T00:29:00Z"))).toBe(true); // Monday 00:29
    expect(windowOpen(w, at("2026-11-30T00:30:00Z"))).toBe(false); // Monday 00:30
  });

  it("follows the zone's wall clock, not UTC: the same instant is inside in one zone and outside in another", () => {
    const berlin: MaintenanceWindow = {
      days: ["Sat"],
      start_time: "02:00",
      length_minutes: 120,
      time_zone: "Europe/Berlin",
    };
    // Saturday 02:30 in Berlin (UTC+1 in November) is Saturday 01:30 UTC.
    expect(windowOpen(berlin, at("2026-11-28T01:30:00Z"))).toBe(true);
    expect(windowOpen({ ...berlin, time_zone: "UTC" }, at("2026-11-28T01:30:00Z"))).toBe(false);
    // The day boundary is local too: Friday 23:30 UTC is already Saturday 00:30 in Berlin.
    const satMidnight: MaintenanceWindow = {
      days: ["Sat"],
      start_time: "00:00",
      length_minutes: 60,
      time_zone: "Europe/Berlin",
    };
    expect(windowOpen(satMidnight, at("2026-11-27T23:30:00Z"))).toBe(true);
    expect(windowOpen({ ...satMidnight, time_zone: "UTC" }, at("2026-11-27T23:30:00Z"))).toBe(false);
  });

  it("obeys clock times across a DST change (summer offset differs from winter)", () => {
    const w: MaintenanceWindow = {
      days: ["Sun"],
      start_time: "01:30",
      length_minutes: 60,
      time_zone: "America/New_York",
    };
    // July: EDT (UTC-4): 01:30 local = 05:30 UTC. November: EST (UTC-5): 01:30 local = 06:30 UTC.
    expect(windowOpen(w, at("2026-07-05T05:45:00Z"))).toBe(true);
    expect(windowOpen(w, at("2026-11-29T05:45:00Z"))).toBe(false);
    expect(windowOpen(w, at("2026-11-29T06:45:00Z"))).toBe(true);
  });

  it("treats no windows as always open and several windows as a union", () => {
    expect(withinWindows([], T0)).toBe(true);
    const a: MaintenanceWindow = { days: ["Tue"], start_time: "00:00", length_minutes: 60, time_zone: "UTC" };
    const b: MaintenanceWindow = { days: ["Mon"], start_time: "11:00", length_minutes: 120, time_zone: "UTC" };
    expect(withinWindows([a], T0)).toBe(false);
    expect(withinWindows([a, b], T0)).toBe(true);
  });

  it("gates acquire with outside_maintenance_window, using the clock it is given", () => {
    const w: MaintenanceWindow = { days: ["Mon"], start_time: "12:00", length_minutes: 1, time_zone: "UTC" };
    const g = configure(null, { slots: 1, windows: [w] }, T0);
    expect(acquire(g, "a", null, T0 + 60_000)).toMatchObject({ ok: false, kind: "outside_maintenance_window" });
    expect(acquire(g, "a", null, T0 + 59_999)).toMatchObject({ ok: true });
  });
});
