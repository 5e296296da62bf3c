/**
 * OpenID Connect sign-in end to end: a real OpenID provider (the `oidc-provider` package, with its
 * development login and consent pages) and a private server configured to use it. A small
 * browser (cookies per origin, redirects, forms) walks the console sign-in and `hm login --sso`.
 */
import { mkdtempSync } from "node:fs";
import type { Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { oidcVars, startOidcProvider } from "./oidc-provider.ts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { main } from "../cli/main.ts";
import { freePort, startLocalServer, type LocalServer } from "../scripts/local-server.ts";

/** The provider's users: login name → claims. */
const USERS: Record<string, { email: string; groups: string[] }> = {
  ana: { email: "Ana@Example.com", groups: ["platform"] },
  zed: { email: "zed@example.com", groups: ["marketing"] },
};

let server: LocalServer;
let provider: Server;
let issuer: string;

async function api(method: string, path: string, body?: unknown, token = server.admin) {
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: res.status, json: (await res.json().catch(() => null)) as any };
}

/** Just enough of a browser: a cookie jar per host, manual redirects, and forms submitted as they are. */
class Browser {
  private jar = new Map<string, Map<string, string>>();
  visited: string[] = [];

  cookie(host: string, name: string) {
    return this.jar.get(host)?.get(name);
  }

  private async fetch(url: string, init: RequestInit = {}) {
    const u = new URL(url);
    const cookies = [...(this.jar.get(u.host) ?? new Map())].map(([k, v]) => `${k}=${v}`).join("; ");
    const res = await fetch(url, {
      ...init,
      redirect: "manual",
      headers: { ...(init.headers as Record<string, string>), ...(cookies ? { cookie: cookies } : {}) },
    });
    for (const line of res.headers.getSetCookie()) {
      const [pair] = line.split(";");
      const i = pair.indexOf("=");
      const jar = this.jar.get(u.host) ?? new Map<string, string>();
      const value = pair.slice(i + 1);
      if (value === "" || /max-age=0/i.test(line)) jar.delete(pair.slice(0, i).trim());
      else jar.set(pair.slice(0, i).trim(), value);
      this.jar.set(u.host, jar);
    }
    return res;
  }

  /** Follows redirects and submits forms (the login as `login`) until a page without a form. */
  async go(start: string, login: string, stopAt?: (url: string) => boolean) {
    let url = start;
    let init: RequestInit = {};
    for (let hop = 0; hop < 20; hop++) {
      this.visited.push(url);
      if (stopAt?.(url)) return { url, status: 0, body: "" };
      const res = await this.fetch(url, init);
      init = {};
      const location = res.headers.get("location");
      if (res.status >= 300 && res.status < 400 && location) {
        url = new URL(location, url).toString();
        continue;
      }
      const body = await res.text();
      const form = /<form[^>]*action="([^"]+)"[^>]*method="post"/i.exec(body);
      if (!form || new URL(url).host !== new URL(issuer).host) return { url, status: res.status, body };
      const fields = new URLSearchParams();
      for (const [tag] of body.matchAll(/<input[^>]*>/g)) {
        const name = /name="([^"]+)"/.exec(tag)?.[1];
        if (!name) continue;
        const value = /value="([^"]*)"/.exec(tag)?.[1] ?? "";
        fields.set(name, name === "login" ? login : name === "password" ? "any" : value);
      }
      url = new URL(form[1].replace(/&amp;/g, "&"), url).toString();
      init = { method: "POST", body: fields, headers: { "content-type": "application/x-www-form-urlencoded" } };
    }
    throw new Error(`too many hops: ${this.visited.join(" → ")}`);
  }
}

beforeAll(async () => {
  const port = await freePort();
  issuer = `http://127.0.0.1:${port}`;
  server = await startLocalServer({
    label: "sso",
    devArgs: oidcVars(issuer),
  });
  provider = startOidcProvider(port, server.url, USERS);
  const fleet = await api("POST", "/v1/fleets", { id: "web" });
  expect(fleet.status).toBe(201);
  const mapped = await api("POST", "/v1/sso/mappings", {
    kind: "group",
    value: "platform",
    scope: "write",
    fleets: ["web"],
  });
  expect(mapped.status).toBe(201);
}, 180_000);

afterAll(() => {
  provider?.close();
  server?.stop();
});

describe("OpenID Connect sign-in against a real provider", () => {
  it("signs a mapped user in to the console with PKCE, state and nonce, as a short-lived token", async () => {
    const browser = new Browser();
    const end = await browser.go(`${server.url}/console/sso?next=%2Fconsole%2Faudit`, "ana");
    // Back on the console, signed in, on the page asked for (through the sign-in page's redirect).
    expect(new URL(end.url).pathname).toBe("/console/audit");
    expect(end.status).toBe(200);
    const authorize = new URL(browser.visited.find((u) => u.startsWith(`${issuer}/auth?`))!);
    expect(authorize.searchParams.get("code_challenge_method")).toBe("S256");
    expect(authorize.searchParams.get("state")).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(authorize.searchParams.get("nonce")).toMatch(/^[A-Za-z0-9_-]{43}$/);

    const sessions = await api("GET", "/v1/sso/sessions");
    const mine = sessions.json.items.find((s: any) => s.email === "ana@example.com" && s.client === "console");
    expect(mine).toMatchObject({ provider: "oidc", scope: "write", fleets: ["web"] });
    const token = await api("GET", `/v1/tokens/${mine.token_id}`);
    expect(token.json.description).toBe("ana@example.com signed in through OpenID Connect (console)");
    expect(Date.parse(token.json.expires_at) - Date.now()).toBeLessThanOrEqual(8 * 3600_000);

    // The callback works once: replaying it finds no sign-in.
    const callback = browser.visited.find((u) => u.startsWith(`${server.url}/console/sso/callback`))!;
    const again = await fetch(callback, { redirect: "manual" });
    expect(again.status).toBe(401);
  });

  it("refuses a user no mapping names, and a callback completed in another browser", async () => {
    const end = await new Browser().go(`${server.url}/console/sso`, "zed");
    expect(end.status).toBe(403);
    expect(end.body).toContain("no SSO mapping");

    // The victim's browser gets the attacker's callback URL: it did not start that sign-in.
    const attacker = new Browser();
    const stop = await attacker.go(`${server.url}/console/sso`, "ana", (u) => u.includes("/console/sso/callback"));
    const victim = await new Browser().go(stop.url, "ana");
    expect(victim.status).toBe(403);
    expect(victim.body).toContain("another browser");
  });

  it("hm login --sso: loopback redirect, one-time code, a short-lived token in the config", async () => {
    const home = mkdtempSync(join(tmpdir(), "hm-sso-"));
    let stderr = "";
    let stdout = "";
    let walked: Promise<unknown> | null = null;
    const browser = new Browser();
    const code = await main(["login", "--sso", "--url", server.url, "--name", "sso", "-o", "json"], {
      stdout: (s) => void (stdout += s),
      stderr: (s) => {
        stderr += s;
        const url = /https?:\/\/\S+\/auth\?\S+/.exec(stderr)?.[0];
        if (url && !walked) walked = browser.go(url, "ana");
      },
      stdin: Readable.from([]),
      interactive: false,
      env: { HM_CONFIG: join(home, "config.json") },
      cwd: home,
    });
    await walked;
    expect([code, stderr]).toEqual([0, expect.stringContaining("Sign in in your browser")]);
    const out = JSON.parse(stdout);
    expect(Date.parse(out.expires_at) - Date.now()).toBeLessThanOrEqual(12 * 3600_000);
    // The browser ended on hm's own listener, on loopback.
    expect(browser.visited.at(-1)).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/callback\?code=/);

    const { readFileSync } = await import("node:fs");
    const saved = JSON.parse(readFileSync(join(home, "config.json"), "utf8")).contexts.sso.token as string;
    const fleets = await api("GET", "/v1/fleets/web", undefined, saved);
    expect(fleets.status).toBe(200);
    const sessions = await api("GET", "/v1/sso/sessions");
    const mine = sessions.json.items.find((s: any) => s.client === "cli" && s.email === "ana@example.com");
    expect(mine).toBeTruthy();

    // The one-time code works once.
    const used = new URL(browser.visited.at(-1)!).searchParams.get("code");
    const replay = await fetch(`${server.url}/v1/sso/cli/exchange`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ code: used, code_verifier: "x".repeat(43) }),
    });
    expect(replay.status).toBe(401);

    // An admin ends the session (hm sessions end): the saved token stops working at once.
    let ended = "";
    const endCode = await main(["sessions", "end", mine.token_id, "--yes", "-o", "json"], {
      stdout: (s) => void (ended += s),
      stderr: () => {},
      stdin: Readable.from([]),
      interactive: false,
      env: { HM_CONFIG: join(home, "none.json"), HM_URL: server.url, HM_TOKEN: server.admin },
      cwd: home,
    });
    expect([endCode, JSON.parse(ended).token_id]).toEqual([0, mine.token_id]);
    expect((await api("GET", "/v1/fleets/web", undefined, saved)).status).toBe(401);
  });
});
