import { describe, expect, it } from "vitest";
import { canonicalJson, objectKeyOrder } from "../src/lib/canonical-json";
import { sameValue, specHash } from "../src/specs/canonical";

/**
 * A spec's hash is its ETag and what the audit rows of its applies name: stored and compared
 * across releases, so its bytes must never change. This spec has keys JavaScript orders before
 * the others (integer-like: "2", "10", "4294967295"), where a plain sort of the keys would differ.
 */
const spec = {
  version: 1,
  fleet: { id: "edge", description: "the edge fleet", settings: { stale_after_s: 300, reboot: undefined } },
  intent: {
    roles: { web: { agents: ["nginx", "node-exporter"] }, "10": { agents: [] }, "2": { agents: ["a"] } },
    channels: { nginx: { image: "registry.example/nginx:1.27", version: "1.27" } },
  },
  servers: {
    "web-1.example.com": { labels: { zone: "a", "10": "ten", "2": "two", "4294967295": "max", "4294967296": "past" } },
    "1": { labels: {} },
  },
  groups: [{ name: "default", slots: 1, windows: [{ days: ["mon", "tue"], start: "02:00", hours: 3 }] }],
  webhooks: [],
};

describe("a spec's hash", () => {
  it("is the bytes it always was for a fixed spec", async () => {
    expect(await specHash(spec)).toBe("f9a79f29612cbf19a614100c1283ca11");
  });

  it("differs from the plain sort of keys where JavaScript orders integer-like keys first", () => {
    const labels = { zone: "a", "10": "ten", "2": "two" };
    expect(canonicalJson(labels)).toBe('{"10":"ten","2":"two","zone":"a"}');
    expect(JSON.stringify(JSON.parse(canonicalJson(labels)))).toBe('{"2":"two","10":"ten","zone":"a"}');
  });

  it("is the same whatever the order of the keys, and sameValue says so", async () => {
    const shuffled = {
      webhooks: [],
      groups: spec.groups,
      servers: spec.servers,
      intent: spec.intent,
      fleet: spec.fleet,
      version: 1,
    };
    expect(await specHash(shuffled)).toBe(await specHash(spec));
    expect(sameValue(shuffled, spec)).toBe(true);
    expect(sameValue({ a: [1, 2] }, { a: [2, 1] })).toBe(false);
  });
});

/** The spec's canonical text as its own code wrote it before the two forms were one. */
function formerSpecJson(value: unknown): string {
  const sorted = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(sorted);
    if (v && typeof v === "object") {
      const o = v as Record<string, unknown>;
      return Object.fromEntries(
        Object.keys(o)
          .filter((k) => o[k] !== undefined)
          .sort()
          .map((k) => [k, sorted(o[k])]),
      );
    }
    return v;
  };
  return JSON.stringify(sorted(value));
}

describe("the spec's key order in the shared canonical JSON", () => {
  it("writes the bytes the spec's former code wrote, for awkward keys and values", () => {
    const keys = [
      "",
      "a",
      "B",
      "10",
      "2",
      "01",
      "-1",
      "1.5",
      "4294967294",
      "4294967295",
      "4294967296",
      "é",
      "😀",
      "__proto__",
    ];
    const values: unknown[] = [null, 0, -0, 1.5, "x", true, [], [undefined, null, 1], {}, undefined];
    let seed = 7;
    const rand = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed % n);
    const build = (depth: number): unknown => {
      if (depth === 0 || rand(4) === 0) return values[rand(values.length)];
      if (rand(3) === 0) return Array.from({ length: rand(4) }, () => build(depth - 1));
      const o: Record<string, unknown> = {};
      for (let i = rand(6); i > 0; i--)
        Object.defineProperty(o, keys[rand(keys.length)], {
          value: build(depth - 1),
          enumerable: true,
          configurable: true,
          writable: true,
        });
      return o;
    };
    for (let i = 0; i < 500; i++) {
      const v = build(4);
      if (v === undefined) continue;
      expect(canonicalJson(v, objectKeyOrder)).toBe(formerSpecJson(v));
    }
  });
});
