import { describe, expect, it } from "vitest";
import {
  allowance,
  budgetBlock,
  mayDisrupt,
  type BudgetInput,
  type Disruption,
  type Member,
} from "../src/fleetlock/budget";

const members = (spec: Record<string, string>) =>
  new Map(Object.entries(spec).map(([id, zone]) => [id, { hostname: `${id}.example.com`, labels: { zone } }]));

const input = (
  budget: BudgetInput["budget"],
  zones: Record<string, string>,
  disrupted: Record<string, Disruption[]> = {},
): BudgetInput => ({ budget, members: members(zones), disrupted: new Map(Object.entries(disrupted)) });

const ZONES = { a1: "a", a2: "a", a3: "a", b1: "b", b2: "b", c1: "c" };

describe("the disruption budget (pure)", () => {
  it("turns a count or a share into servers, a share rounded up", () => {
    expect(allowance(2, 100)).toBe(2);
    expect(allowance("10%", 100)).toBe(10);
    expect(allowance("10%", 15)).toBe(2);
    expect(allowance("1%", 1)).toBe(1);
    expect(allowance("50%", 0)).toBe(0);
  });

  it("allows anything without a budget", () => {
    expect(mayDisrupt(input(null, ZONES, { a1: ["reboot"], a2: ["reboot"] }), "a3")).toEqual({ ok: true });
  });

  it("refuses a second server of a zone with per_label zone 1, naming the holder", () => {
    const i = input({ max_unavailable: null, per_label: { zone: 1 } }, ZONES, { a1: ["reboot"] });
    const v = mayDisrupt(i, "a2");
    expect(v).toMatchObject({ ok: false, limit: "zone", value: "a", allowed: 1, holders: ["a1"] });
    expect(mayDisrupt(i, "b1")).toEqual({ ok: true });
    if (v.ok) throw new Error("refused above");
    expect(budgetBlock(i, v)).toMatchObject({
      kind: "budget",
      servers: ["a1.example.com"],
      detail: "zone=a",
      value: 1,
      threshold: 1,
    });
    expect(budgetBlock(i, v).message).toMatch(/zone=a.*a1\.example\.com/);
  });

  it("counts a server once whatever disrupts it: a rollout on a rebooting server takes nothing more", () => {
    const i = input({ max_unavailable: 1, per_label: { zone: 1 } }, ZONES, { a1: ["reboot", "rollout"] });
    expect(mayDisrupt(i, "a1")).toEqual({ ok: true });
    expect(mayDisrupt(i, "b1")).toMatchObject({ ok: false, limit: "fleet", allowed: 1 });
  });

  it("counts unavailable (stale, failed) servers against the fleet and their zone", () => {
    const i = input({ max_unavailable: 2, per_label: { zone: 1 } }, ZONES, { b1: ["unavailable"] });
    expect(mayDisrupt(i, "b2")).toMatchObject({ ok: false, limit: "zone", value: "b" });
    expect(mayDisrupt(i, "a1")).toEqual({ ok: true });
    const full = input({ max_unavailable: 2, per_label: {} }, ZONES, { b1: ["unavailable"], c1: ["reboot"] });
    expect(mayDisrupt(full, "a1")).toMatchObject({ ok: false, limit: "fleet", holders: ["b1", "c1"] });
  });

  it("takes a share of a zone from the servers of that zone", () => {
    // zone a has 3 servers: 50% of them is 2 (rounded up).
    const i = input({ max_unavailable: null, per_label: { zone: "50%" } }, ZONES, { a1: ["reboot"] });
    expect(mayDisrupt(i, "a2")).toEqual({ ok: true });
    const two = input({ max_unavailable: null, per_label: { zone: "50%" } }, ZONES, {
      a1: ["reboot"],
      a2: ["rollout"],
    });
    expect(mayDisrupt(two, "a3")).toMatchObject({ ok: false, allowed: 2 });
  });

  it("does not limit a server by a label it does not carry, but still by the fleet's limit", () => {
    const i: BudgetInput = {
      budget: { max_unavailable: 2, per_label: { zone: 1 } },
      members: new Map<string, Member>([
        ["a1", { hostname: "a1", labels: { zone: "a" } }],
        ["x", { hostname: "x", labels: {} }],
        ["y", { hostname: "y", labels: {} }],
      ]),
      disrupted: new Map([["a1", ["reboot"] as Disruption[]]]),
    };
    expect(mayDisrupt(i, "x")).toEqual({ ok: true });
    const more = { ...i, disrupted: new Map([...i.disrupted, ["x", ["reboot"] as Disruption[]]]) };
    expect(mayDisrupt(more, "y")).toMatchObject({ ok: false, limit: "fleet" });
  });
});
