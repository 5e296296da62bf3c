import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { BASE, call, createFleet } from "./helpers";
import { consoleFetch, signIn } from "./console-helpers";

async function scopedToken(fleets: string[], scope = "read", extra: Record<string, unknown> = {}) {
  const res = await call("POST", "/v1/tokens", {
    body: { name: "wall screen", scope, fleets, description: "lobby display", ...extra },
  });
  expect(res.status).toBe(201);
  return res.json as { id: string; token: string };
}

describe("the console says who you are and what you may do", () => {
  it("names the token, how it signed in, its scope and fleets, and what it may not do", async () => {
    const { id: fleet } = await createFleet();
    const t = await scopedToken([fleet]);
    const { cookie } = await signIn(t.token);
    const overview = await (await consoleFetch(`/console?fleet=${fleet}`, { cookie })).text();
    expect(overview).toMatch(/id="who"[^>]*href="\/console\/me"/);
    expect(overview).toContain("wall screen · read · 1 fleet");
    const me = await consoleFetch("/console/me", { cookie });
    expect(me.status).toBe(200);
    const html = await me.text();
    expect(html).toMatch(/id="me-name">wall screen<span class="muted"> — lobby display/);
    expect(html).toContain('id="me-via">an operator token<');
    expect(html).toContain(`id="me-fleets">${fleet}<`);
    expect(html).toContain("✓ See servers");
    expect(html).toContain("✕ Change them");
    expect(html).toContain("they need a token of every fleet");
  });

  it("shows the ADMIN_TOKEN as itself, on every fleet", async () => {
    const { cookie } = await signIn();
    const html = await (await consoleFetch("/console/me", { cookie })).text();
    expect(html).toContain('id="me-via">the deployment&#39;s ADMIN_TOKEN secret<');
    expect(html).toContain('id="me-fleets">every fleet, present and future<');
    expect(html).toContain("✓ Deployment-wide changes");
  });

  it("tells a scoped user whose fleets do not exist yet so, rather than to create one", async () => {
    const t = await scopedToken(["not-created-yet"]);
    const { cookie } = await signIn(t.token);
    const html = await (await consoleFetch("/console", { cookie })).text();
    expect(html).toContain("None of your fleets exists yet");
    expect(html).not.toContain("hm fleets create");
  });

  it("sends a visitor with no session and no Access JWT to sign in, and back to the page and query asked for", async () => {
    const res = await consoleFetch("/console/audit?actor=token%3Ax&limit=5");
    expect(res.status).toBe(303);
    expect(res.headers.get("Location")).toBe(
      `/console/sign-in?next=${encodeURIComponent("/console/audit?actor=token%3Ax&limit=5")}`,
    );
  });

  it("ends the session when its token expires", async () => {
    const { id: fleet } = await createFleet();
    const t = await scopedToken([fleet], "read", { expires_at: new Date(Date.now() + 3600_000).toISOString() });
    const { cookie } = await signIn(t.token);
    expect((await consoleFetch("/console/me", { cookie })).status).toBe(200);
    await env.DB.prepare("UPDATE tokens SET expires_at = ? WHERE id = ?")
      .bind(Date.now() - 1, t.id)
      .run();
    // The live socket asks the session alone (no API call that the expired token would fail).
    const live = await consoleFetch(`/console/live?fleet=${fleet}`, {
      cookie,
      headers: { Upgrade: "websocket", Origin: BASE },
    });
    expect(live.status).toBe(401);
    const after = await consoleFetch("/console/me", { cookie });
    expect(after.status).toBe(303);
    expect(after.headers.get("Location")).toMatch(/^\/console\/sign-in/);
  });
});

describe("a console form larger than a form can be", () => {
  it("is refused with a 413 page on every action, not a 500, and changes nothing", async () => {
    const fleet = await createFleet();
    await call("PUT", `/v1/fleets/${fleet.id}/reboot-groups/night`, { body: { slots: 2 } });
    const s = await signIn();
    for (const path of [
      `/console/groups/night/resize?fleet=${fleet.id}`,
      `/console/enrollment/create?fleet=${fleet.id}`,
      `/console/drift/fix?fleet=${fleet.id}`,
      "/console/sign-out",
    ]) {
      const res = await consoleFetch(path, {
        cookie: s.cookie,
        body: { _csrf: s.csrf, slots: "1", pad: "x".repeat(20_000) },
      });
      const html = await res.text();
      expect([path, res.status], html.slice(0, 300)).toEqual([path, 413]);
      expect(html).toContain("a console form is at most 16 KB");
    }
    expect((await call("GET", `/v1/fleets/${fleet.id}/reboot-groups/night`)).json.slots).toBe(2);
    expect((await call("GET", `/v1/fleets/${fleet.id}/enrollment-tokens`)).json.items).toEqual([]);
    // The session is still signed in: the sign-out was refused too.
    expect((await consoleFetch("/console/me", { cookie: s.cookie })).status).toBe(200);
  });
});

describe("a console page asked for with a filter or cursor the API refuses", () => {
  it("answers 400 with the API's words, not 502 as if the API had failed", async () => {
    const fleet = await createFleet();
    const s = await signIn();
    for (const query of ["status=happy", "cursor=%00", "cursor=__proto__", `agent=${"x".repeat(3000)}`]) {
      const res = await consoleFetch(`/console/servers?fleet=${fleet.id}&${query}`, { cookie: s.cookie });
      const html = await res.text();
      expect([query.slice(0, 20), res.status], html.slice(0, 200)).toEqual([query.slice(0, 20), 400]);
      expect(html).toMatch(/The API answered 400 invalid_(query|cursor)/);
    }
  });
});
