import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { call, createFleet } from "./helpers";

/** A live SSO session row and its token, written straight to D1 (signing in 500 users would take minutes). */
const sessionRows = (id: string, fleets: "*" | string[], createdAt: number) => [
  env.DB.prepare(
    "INSERT INTO tokens (id, kind, scope, server_id, name, hash, created_by, created_at, fleets, expires_at) VALUES (?, 'operator', 'read', NULL, ?, ?, 'test', ?, ?, ?)",
  ).bind(id, `sso:${id}`, `hash-${id}`, createdAt, JSON.stringify(fleets), createdAt + 3600_000),
  env.DB.prepare(
    "INSERT INTO sso_sessions (token_id, provider, subject, email, client, created_at, expires_at) VALUES (?, 'oidc', ?, ?, 'cli', ?, ?)",
  ).bind(id, `sub-${id}`, `${id}@example.com`, createdAt, createdAt + 3600_000),
];

describe("GET /v1/sso/sessions for an admin limited to some fleets", () => {
  it("lists its fleets' sessions even behind a page's worth of newer sessions of other fleets", async () => {
    const a = (await createFleet()).id;
    const b = (await createFleet()).id;
    const now = Date.now();
    const own = crypto.randomUUID();
    const statements = sessionRows(own, [a], now);
    // 500 newer sessions it may not see: every one of B, of "*", or of A and B together.
    for (let i = 0; i < 500; i++) {
      const fleets = i % 3 === 0 ? [b] : i % 3 === 1 ? "*" : [a, b];
      statements.push(...sessionRows(crypto.randomUUID(), fleets, now + 1 + i));
    }
    await env.DB.batch(statements);

    const admin = await call("POST", "/v1/tokens", { body: { name: "a-admin", scope: "admin", fleets: [a] } });
    expect(admin.status).toBe(201);
    const listed = await call("GET", "/v1/sso/sessions", { token: admin.json.token });
    expect(listed.status).toBe(200);
    expect(listed.json.items.map((s: { token_id: string }) => s.token_id)).toEqual([own]);

    // A "*" admin sees them all, newest first (up to its page).
    const all = await call("GET", "/v1/sso/sessions");
    expect(all.json.items).toHaveLength(500);
    expect(all.json.items.some((s: { token_id: string }) => s.token_id === own)).toBe(false);
  });
});
