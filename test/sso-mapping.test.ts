import { describe, expect, it } from "vitest";
import {
  accessKeyMatch,
  fleetsWithin,
  grantOf,
  specRule,
  type Identity,
  type MappingRule,
} from "../src/auth/sso-mapping";

const who = (over: Partial<Identity> = {}): Identity => ({
  provider: "oidc",
  subject: "u1",
  email: "ana@example.com",
  groups: [],
  ...over,
});

describe("SSO mapping", () => {
  const rules: MappingRule[] = [
    { kind: "group", value: "platform", scope: "write", fleets: ["web"] },
    { kind: "group", value: "db-oncall", scope: "admin", fleets: ["db"] },
    { kind: "group", value: "db-readers", scope: "admin", fleets: ["db-replica", "db"] },
    { kind: "email", value: "ana@example.com", scope: "read", fleets: "*" },
    { kind: "group", value: "sre", scope: "admin", fleets: "*" },
  ];

  it("gives nothing to an identity no mapping names", () => {
    expect(grantOf(who({ email: "bob@example.com", groups: ["marketing"] }), rules)).toBeNull();
    expect(grantOf(who({ email: null, groups: [] }), rules)).toBeNull();
  });

  it("matches an email and a group, keeping the highest scope on the fleets that give it", () => {
    expect(grantOf(who(), rules)).toEqual({ scope: "read", fleets: "*" });
    expect(grantOf(who({ groups: ["platform"] }), rules)).toEqual({ scope: "write", fleets: ["web"] });
    // admin on db and db-replica; "write on web" is not raised to admin on web.
    expect(grantOf(who({ groups: ["platform", "db-oncall", "db-readers"] }), rules)).toEqual({
      scope: "admin",
      fleets: ["db", "db-replica"],
    });
    expect(grantOf(who({ groups: ["db-oncall", "sre"] }), rules)).toEqual({ scope: "admin", fleets: "*" });
  });

  it("matches an email whole: not the same name at another domain, nor a group spelled as the address", () => {
    expect(grantOf(who({ email: "ana@example.org" }), rules)).toBeNull();
    expect(grantOf(who({ email: "ana@example.com.evil.test" }), rules)).toBeNull();
    expect(grantOf(who({ email: null, groups: ["ana@example.com"] }), rules)).toBeNull();
  });

  it("matches a group by its exact spelling, not a prefix or another case", () => {
    expect(grantOf(who({ email: null, groups: ["Platform", "platform-x"] }), rules)).toBeNull();
  });
});

describe("SSO mapping rows of fleet specs", () => {
  it("reads a spec's key as its kind and the rest as the name, colons included", () => {
    expect(accessKeyMatch("group:ops:on-call")).toEqual({ kind: "group", value: "ops:on-call" });
    expect(accessKeyMatch("email:ana@example.com")).toEqual({ kind: "email", value: "ana@example.com" });
  });

  it("gives a spec's row its own fleet only, combined with D1's mappings by the same rule", () => {
    const d1: MappingRule[] = [{ kind: "group", value: "platform", scope: "read", fleets: ["web", "db"] }];
    const spec = [
      specRule({ fleetId: "web", kind: "group", value: "platform", scope: "write" }),
      specRule({ fleetId: "batch", kind: "email", value: "ana@example.com", scope: "write" }),
      specRule({ fleetId: "db", kind: "group", value: "dba", scope: "admin" }),
    ];
    expect(spec[0].fleets).toEqual(["web"]);
    // write from web's and batch's specs; the read on db from D1 is the lower grant, dropped.
    expect(grantOf(who({ groups: ["platform"] }), [...d1, ...spec])).toEqual({
      scope: "write",
      fleets: ["batch", "web"],
    });
    expect(grantOf(who({ email: "bob@example.com", groups: ["platform"] }), [...d1, ...spec])).toEqual({
      scope: "write",
      fleets: ["web"],
    });
    expect(grantOf(who({ email: null, groups: ["dba"] }), [...d1, ...spec])).toEqual({
      scope: "admin",
      fleets: ["db"],
    });
    expect(grantOf(who({ email: null, groups: ["marketing"] }), spec)).toBeNull();
  });
});

describe("fleetsWithin: what a fleet-limited admin may see of mappings and sessions", () => {
  const admin = (fleets: "*" | string[]) =>
    ({ kind: "operator", id: "t", name: "t", scope: "admin", fleets, via: "token" }) as const;
  it('holds a list within the admin\'s own list, and "*" only for a "*" admin', () => {
    expect(fleetsWithin("*", admin("*"))).toBe(true);
    expect(fleetsWithin(["a", "z"], admin("*"))).toBe(true);
    expect(fleetsWithin(["a"], admin(["a", "b"]))).toBe(true);
    expect(fleetsWithin(["a", "b"], admin(["a", "b"]))).toBe(true);
    expect(fleetsWithin(["a", "c"], admin(["a", "b"]))).toBe(false);
    expect(fleetsWithin("*", admin(["a", "b"]))).toBe(false);
    expect(fleetsWithin(["a"], { kind: "server", serverId: "s", tokenHash: "h" })).toBe(false);
  });
});
