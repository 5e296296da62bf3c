import { describe, expect, it } from "vitest";
import { grantOf, type Identity, type MappingRule } from "../src/sso/mapping";

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

  it("matches a group by its exact spelling, not a prefix or another case", () => {
    expect(grantOf(who({ email: null, groups: ["Platform", "platform-x"] }), rules)).toBeNull();
  });
});
