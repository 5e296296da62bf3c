import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { MAX_SSO_MAPPINGS } from "../src/domain/limits";
import { call, uniq } from "./helpers";

const mappings = async () => (await env.DB.prepare("SELECT count(*) AS n FROM sso_mappings").first<{ n: number }>())!.n;

describe("POST /v1/sso/mappings at the cap", () => {
  it("takes one of ten creates racing for the last place, and audits only that one", async () => {
    // Fill to one below the cap straight in D1 (creating 499 through the API would take minutes).
    const seeded = MAX_SSO_MAPPINGS - 1 - (await mappings());
    const rows = Array.from({ length: seeded }, (_, i) =>
      env.DB.prepare(
        "INSERT INTO sso_mappings (id, kind, value, scope, fleets, created_by, created_at) VALUES (?, 'group', ?, 'read', '\"*\"', 'test', ?)",
      ).bind(crypto.randomUUID(), uniq(`seed-${i}`), Date.now()),
    );
    for (let i = 0; i < rows.length; i += 100) await env.DB.batch(rows.slice(i, i + 100));
    expect(await mappings()).toBe(MAX_SSO_MAPPINGS - 1);

    const prefix = uniq("racer");
    const answers = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        call("POST", "/v1/sso/mappings", {
          body: { kind: "email", value: `${prefix}-${i}@example.com`, scope: "read", fleets: "*" },
        }),
      ),
    );
    expect(answers.map((a) => a.status).sort()).toEqual([201, ...Array(9).fill(400)]);
    for (const a of answers.filter((a) => a.status === 400))
      expect(a.json.error).toMatchObject({ code: "validation_failed", message: expect.stringContaining("at most") });
    // Past the cap, a sign-in would read only the first MAX_SSO_MAPPINGS and silently drop the rest.
    expect(await mappings()).toBe(MAX_SSO_MAPPINGS);
    const audited = await env.DB.prepare(
      "SELECT count(*) AS n FROM audit_log WHERE action = 'sso.mapping.create' AND details LIKE ?",
    )
      .bind(`%${prefix}%`)
      .first<{ n: number }>();
    expect(audited!.n).toBe(1);
  });

  it("refuses a create at the cap writing nothing, and takes it once a place is free", async () => {
    expect(await mappings()).toBe(MAX_SSO_MAPPINGS);
    const value = `${uniq("late")}@example.com`;
    const body = { kind: "email", value, scope: "read", fleets: "*" };
    const audit = () =>
      env.DB.prepare("SELECT count(*) AS n FROM audit_log WHERE details LIKE ?")
        .bind(`%${value}%`)
        .first<{ n: number }>();
    const full = await call("POST", "/v1/sso/mappings", { body });
    expect(full.status).toBe(400);
    expect(await mappings()).toBe(MAX_SSO_MAPPINGS);
    expect((await audit())!.n).toBe(0);

    await env.DB.prepare(
      "DELETE FROM sso_mappings WHERE id = (SELECT id FROM sso_mappings WHERE created_by = 'test' LIMIT 1)",
    ).run();
    expect((await call("POST", "/v1/sso/mappings", { body })).status).toBe(201);
    expect((await audit())!.n).toBe(1);
    // The same mapping again is a duplicate while there is room for none: still refused, still one row.
    expect((await call("POST", "/v1/sso/mappings", { body })).status).toBe(400);
    expect(await mappings()).toBe(MAX_SSO_MAPPINGS);
  });
});
