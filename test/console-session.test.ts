import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { BASE, call, createFleet, uniq } from "./helpers";
import { consoleFetch, cookiesOf, signIn, SESSION } from "./console-helpers";

async function operatorToken(scope: "read" | "write" | "admin") {
  const res = await call("POST", "/v1/tokens", { body: { name: uniq("console"), scope } });
  return res.json as { id: string; token: string };
}

describe("console sessions", () => {
  it("/ redirects to /console, and /console without a session goes to sign-in", async () => {
    const root = await consoleFetch("/");
    expect(root.status).toBe(302);
    expect(root.headers.get("Location")).toBe("/console");
    const page = await consoleFetch("/console");
    expect(page.status).toBe(303);
    expect(page.headers.get("Location")).toBe("/console/sign-in?next=%2Fconsole");
  });

  it("exchange a token for an HttpOnly, Secure, SameSite=Strict cookie that expires; only its hash is stored", async () => {
    const s = await signIn();
    expect(s.setCookie).toMatch(/HttpOnly/);
    expect(s.setCookie).toMatch(/Secure/);
    expect(s.setCookie).toMatch(/SameSite=Strict/);
    expect(s.setCookie).toMatch(/Max-Age=28800/);
    expect(s.setCookie).toMatch(/Path=\//);
    const rows = await env.DB.prepare("SELECT * FROM console_sessions").all<Record<string, unknown>>();
    const text = JSON.stringify(rows.results);
    expect(text).not.toContain(s.sid);
    expect(text).not.toContain("test-admin-token");
    const overview = await consoleFetch("/console", { cookie: s.cookie });
    expect(overview.status).toBe(200);
  });

  it("refuse a wrong token and a server's token", async () => {
    const page = await consoleFetch("/console/sign-in");
    const signin = cookiesOf(page)["__Host-hm_signin"].value;
    const csrf = /name="_csrf" value="([^"]+)"/.exec(await page.text())![1];
    const bad = await consoleFetch("/console/sign-in", {
      cookie: `__Host-hm_signin=${signin}`,
      body: { _csrf: csrf, token: "nope" },
    });
    expect(bad.status).toBe(401);
    expect(cookiesOf(bad)[SESSION]).toBeUndefined();
  });

  it("sign-in itself needs this origin and the form's token", async () => {
    const page = await consoleFetch("/console/sign-in");
    const signin = cookiesOf(page)["__Host-hm_signin"].value;
    const forged = await consoleFetch("/console/sign-in", {
      cookie: `__Host-hm_signin=${signin}`,
      body: { _csrf: "wrong", token: "test-admin-token" },
    });
    expect(forged.status).toBe(403);
    const elsewhere = await consoleFetch("/console/sign-in", {
      cookie: `__Host-hm_signin=${signin}`,
      body: { _csrf: signin, token: "test-admin-token" },
      origin: "https://evil.example",
    });
    expect(elsewhere.status).toBe(403);
  });

  it("sign-out ends the session: the cookie is cleared and the old id opens nothing", async () => {
    const s = await signIn();
    const out = await consoleFetch("/console/sign-out", { cookie: s.cookie, body: { _csrf: s.csrf } });
    expect(out.status).toBe(303);
    expect(cookiesOf(out)[SESSION].attrs).toMatch(/Max-Age=0/);
    const after = await consoleFetch("/console", { cookie: s.cookie });
    expect(after.status).toBe(303);
    expect(after.headers.get("Location")).toMatch(/^\/console\/sign-in/);
  });

  it("a revoked operator token ends its sessions", async () => {
    const t = await operatorToken("write");
    const s = await signIn(t.token);
    expect((await consoleFetch("/console", { cookie: s.cookie })).status).toBe(200);
    expect((await call("DELETE", `/v1/tokens/${t.id}`)).status).toBe(200);
    // The live socket asks the session alone (no API call that the revoked token would fail).
    const { id: fleet } = await createFleet();
    const live = await consoleFetch(`/console/live?fleet=${fleet}`, {
      cookie: s.cookie,
      headers: { Upgrade: "websocket", Origin: BASE },
    });
    expect(live.status).toBe(401);
    live.webSocket?.close();
    const after = await consoleFetch("/console", { cookie: s.cookie });
    expect(after.status).toBe(303);
    const left = await env.DB.prepare("SELECT COUNT(*) AS n FROM console_sessions WHERE token_id = ?")
      .bind(t.id)
      .first<{ n: number }>();
    expect(left!.n).toBe(0);
  });

  it("an expired session opens nothing", async () => {
    const s = await signIn();
    await env.DB.prepare("UPDATE console_sessions SET expires_at = ? ")
      .bind(Date.now() - 1)
      .run();
    expect((await consoleFetch("/console", { cookie: s.cookie })).status).toBe(303);
  });

  it("records each session's scope: a read token's pages show no action", async () => {
    const t = await operatorToken("read");
    const s = await signIn(t.token);
    const row = await env.DB.prepare("SELECT scope FROM console_sessions WHERE token_id = ?")
      .bind(t.id)
      .first<{ scope: string }>();
    expect(row!.scope).toBe("read");
    const html = await (await consoleFetch("/console/audit", { cookie: s.cookie })).text();
    expect(html).toContain('data-scope="read"');
  });
});
