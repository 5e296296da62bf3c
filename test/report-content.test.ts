import { describe, expect, it } from "vitest";
import { contentKey, sameContent } from "../src/domain/report-content";

// sameContent stands in for comparing contentKeys (the ledger keys and tags its stored report by
// contentKey): it must answer exactly what comparing the two keys would.

const base = {
  generation: 2,
  boot_id: "boot-1",
  agents: [{ name: "a", image: "a:1", version: "1", instance_id: "i-0", state: "running" }],
  errors: [] as unknown[],
  assignments: { units: ["u1"], storage: [] as string[] },
};

const variants: Record<string, typeof base> = {
  same: structuredClone(base),
  generation: { ...base, generation: 3 },
  boot: { ...base, boot_id: "boot-2" },
  state: { ...base, agents: [{ ...base.agents[0], state: "stopped" }] },
  keyOrder: {
    ...base,
    agents: [{ image: "a:1", name: "a", version: "1", instance_id: "i-0", state: "running" }],
  },
  undefinedProperty: { ...base, agents: [{ ...base.agents[0], extra: undefined } as (typeof base.agents)[0]] },
  nullProperty: { ...base, agents: [{ ...base.agents[0], extra: null } as unknown as (typeof base.agents)[0]] },
  moreAgents: { ...base, agents: [...base.agents, base.agents[0]] },
  errors: { ...base, errors: [{ agent: "a", op: "pull", message: "m" }] },
  arrayForObject: { ...base, assignments: [] as unknown as typeof base.assignments },
  undefinedInArray: { ...base, errors: [undefined] },
  nullInArray: { ...base, errors: [null] },
  numberText: { ...base, assignments: { units: [1 as unknown as string], storage: [] } },
  emptyUnits: { ...base, assignments: { units: [], storage: [] } },
  // Same values under keys in another order: another text, so another content.
  emptyReordered: { ...base, assignments: { storage: [], units: [] } },
};

describe("sameContent", () => {
  it("answers what comparing the two reports' contentKeys answers, pair by pair", () => {
    const names = Object.keys(variants);
    for (const a of names)
      for (const b of names) {
        const expected = contentKey(variants[a]) === contentKey(variants[b]);
        expect([a, b, sameContent(variants[a], variants[b])]).toEqual([a, b, expected]);
      }
  });

  it("ignores when the report was made: a new reconciled_at is the same content", () => {
    expect(
      sameContent(
        { ...base, reconciled_at: "2026-11-27T00:00:00.000Z" } as typeof base,
        { ...base, reconciled_at: "2026-11-27T00:00:01.000Z" } as typeof base,
      ),
    ).toBe(true);
  });
});
