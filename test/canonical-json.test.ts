import { describe, expect, it } from "vitest";
import { canonicalJson } from "../src/lib/canonical-json";

describe("canonicalJson", () => {
  it("writes objects with their keys sorted at every depth, arrays in order, undefined members left out", () => {
    expect(canonicalJson({ b: 1, a: { d: [2, 1], c: undefined, e: null } })).toBe('{"a":{"d":[2,1],"e":null},"b":1}');
    expect(canonicalJson({ a: 1, b: 2 })).toBe(canonicalJson({ b: 2, a: 1 }));
  });
});
