import { SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { CONSOLE_JS } from "../src/console/client";
import { ASSETS } from "../src/console/assets";
import { BASE, call, createFleet, registerServer } from "./helpers";
import { consoleFetch, signIn } from "./console-helpers";

describe("console answers", () => {
  it("carry a strict CSP (no inline script or style), frame denial and nosniff, on pages and refusals alike", async () => {
    const s = await signIn();
    for (const res of [
      await consoleFetch("/console/sign-in"),
      await consoleFetch("/console", { cookie: s.cookie }),
      await consoleFetch("/console/servers/x/refresh", { method: "POST" }),
    ]) {
      const csp = res.headers.get("Content-Security-Policy")!;
      expect(csp).toContain("default-src 'none'");
      expect(csp).toContain("script-src 'self'");
      expect(csp).toContain("style-src 'self'");
      expect(csp).toContain("frame-ancestors 'none'");
      expect(csp).not.toContain("unsafe-inline");
      expect(res.headers.get("X-Frame-Options")).toBe("DENY");
      expect(res.headers.get("X-Content-Type-Options")).toBe("nosniff");
    }
  });

  it("render no inline script, no inline style and no external resource", async () => {
    const s = await signIn();
    const html = await (await consoleFetch("/console", { cookie: s.cookie })).text();
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/);
    expect(html).not.toMatch(/\sstyle=/);
    expect(html).not.toMatch(/<style/);
    expect(html).not.toMatch(/(src|href)="(https?:)?\/\//);
  });

  it("serve the client module, the stylesheet and the favicon under content-hashed names, cached for a year, within 60 KB compressed", async () => {
    let total = 0;
    for (const asset of Object.values(ASSETS)) {
      expect(asset.path).toMatch(/\.[0-9a-f]{8}\.(js|css|svg)$/);
      const res = await SELF.fetch(`${BASE}${asset.path}`);
      expect(res.status).toBe(200);
      expect(res.headers.get("Cache-Control")).toBe("public, max-age=31536000, immutable");
      total += await gzippedSize(await res.text());
    }
    expect(total).toBeLessThan(60 * 1024);
  });

  it("answer an address that is no page with an HTML 404 page, not the API's JSON 405", async () => {
    const s = await signIn();
    for (const path of ["/console/rollouts/not-a-uuid", "/console/servers/under_score", "/console/nothing-here"]) {
      const res = await consoleFetch(path, { cookie: s.cookie });
      expect(res.status, path).toBe(404);
      expect(res.headers.get("Content-Type"), path).toMatch(/^text\/html/);
      expect(res.headers.get("Content-Security-Policy"), path).toContain("default-src 'none'");
      expect(await res.text(), path).toContain("Not found");
    }
    const icon = await SELF.fetch(`${BASE}/favicon.ico`, { redirect: "manual" });
    expect(icon.status).toBe(301);
    expect(icon.headers.get("Location")).toBe(ASSETS.icon.path);
  });

  it("ship a client module that parses as JavaScript", () => {
    // An ES module body is valid inside an async function as long as it has no import/export.
    expect(() => new Function(`return (async () => {${CONSOLE_JS}})`)).not.toThrow();
    expect(CONSOLE_JS).not.toMatch(/^\s*(import|export)\s/m);
  });
});

describe("console actions are CSRF-safe", () => {
  async function setup() {
    const fleet = await createFleet();
    const server = await registerServer(fleet.id);
    return { fleet: fleet.id, server: server.id };
  }
  const refreshes = async (server: string) => (await call("GET", `/v1/servers/${server}`)).json.refresh;

  it("refuse a forged action: no token, a wrong token, another origin, no origin; nothing changes", async () => {
    const { server } = await setup();
    const s = await signIn();
    const path = `/console/servers/${server}/refresh`;
    const forged = [
      await consoleFetch(path, { cookie: s.cookie, body: { back: "/console" } }),
      await consoleFetch(path, { cookie: s.cookie, body: { _csrf: "x".repeat(s.csrf.length) } }),
      await consoleFetch(path, { cookie: s.cookie, body: { _csrf: s.csrf }, origin: "https://evil.example" }),
      await consoleFetch(path, { cookie: s.cookie, body: { _csrf: s.csrf }, origin: null }),
      await consoleFetch(path, { cookie: s.cookie, body: { _csrf: s.csrf }, origin: "null" }),
    ];
    expect(forged.map((r) => r.status)).toEqual([403, 403, 403, 403, 403]);
    expect(await refreshes(server)).toBeNull();
    const noSession = await consoleFetch(path, { body: { _csrf: s.csrf } });
    expect(noSession.status).toBe(401);
    expect(await refreshes(server)).toBeNull();
  });

  it("let a genuine action through (form token or X-CSRF-Token header), audited under the operator's token", async () => {
    const { server } = await setup();
    const s = await signIn();
    const res = await consoleFetch(`/console/servers/${server}/refresh`, {
      cookie: s.cookie,
      body: { _csrf: s.csrf, back: `/console/servers/${server}` },
    });
    expect(res.status).toBe(303);
    expect(res.headers.get("Location")).toBe(`/console/servers/${server}`);
    expect(await refreshes(server)).toMatchObject({ requested_by: "token:bootstrap" });
    const viaHeader = await consoleFetch(`/console/servers/${server}/refresh`, {
      cookie: s.cookie,
      body: {},
      headers: { "X-CSRF-Token": s.csrf },
    });
    expect(viaHeader.status).toBe(303);
    const audit = (await call("GET", `/v1/audit?target=server:${server}`)).json.items;
    expect(audit.filter((e: { action: string }) => e.action === "server.refresh").length).toBe(2);
  });

  it("leave the API in charge: a read token's session is refused by the API", async () => {
    const { server } = await setup();
    const token = (await call("POST", "/v1/tokens", { body: { name: "reader", scope: "read" } })).json.token;
    const s = await signIn(token);
    const page = await (await consoleFetch(`/console/servers/${server}`, { cookie: s.cookie })).text();
    expect(page).not.toContain(`/console/servers/${server}/refresh`);
    const res = await consoleFetch(`/console/servers/${server}/refresh`, { cookie: s.cookie, body: { _csrf: s.csrf } });
    expect(res.status).toBe(303);
    const after = await consoleFetch(res.headers.get("Location")!, {
      cookie:
        s.cookie +
        "; " +
        res.headers
          .getSetCookie()
          .map((c) => c.split(";")[0])
          .join("; "),
    });
    expect(await after.text()).toContain("needs a token with scope");
    expect(await refreshes(server)).toBeNull();
  });
});

/** Compressed size as a browser would fetch it (gzip, the Workers runtime's own CompressionStream). */
async function gzippedSize(text: string) {
  const stream = new Blob([text]).stream().pipeThrough(new CompressionStream("gzip"));
  return (await new Response(stream).arrayBuffer()).byteLength;
}
