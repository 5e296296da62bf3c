/**
 * An outsider's probes of what only a real HTTP parser sees, against the private local server:
 * framing tricks (chunked bodies that lie, Content-Length beside Transfer-Encoding), bytes in
 * headers and paths that fetch() would never send, path parameters that try to climb out of their
 * segment, the routes outside the OpenAPI document (the host channel's and the console's
 * WebSocket upgrades, the console's forms, the public downloads) with every wrong credential, and
 * channel frames that no agent sends (binary, megabytes, garbage). Every answer is an error in
 * the documented shape or the console's page, never a 500, and nothing is written.
 */
import { connect } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { beforeAll, describe, expect, inject, it } from "vitest";
import { adminApi } from "./harness.ts";

const url = new URL(inject("hmUrl"));
const admin = inject("hmAdmin");
const api = adminApi;
const uniq = (p: string) => `${p}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 7)}`;

/** Sends raw bytes on a fresh connection and reads until the server closes it or `ms` pass. */
function rawExchange(bytes: string | Buffer, ms = 5_000, want = 1) {
  return new Promise<string>((resolve) => {
    const socket = connect(Number(url.port), url.hostname);
    let text = "";
    socket.setEncoding("latin1");
    socket.on("data", (d: string) => {
      text += d;
      // One whole answer is all a probe reads: a kept-alive or upgraded connection is not waited out.
      // Several answers: the last request closes the connection, which ends the read.
      if (want > 1) return;
      const end = text.indexOf("\r\n\r\n");
      if (end < 0) return;
      const length = /content-length: (\d+)/i.exec(text.slice(0, end));
      if (text.startsWith("HTTP/1.1 101") || (length && text.length >= end + 4 + Number(length[1]))) {
        socket.destroy();
        resolve(text);
      }
    });
    socket.on("error", () => resolve(text));
    socket.on("close", () => resolve(text));
    socket.on("connect", () => socket.write(bytes));
    setTimeout(() => {
      socket.destroy();
      resolve(text);
    }, ms);
  });
}

/** Every HTTP answer in what a connection read: status, and the body parsed if it is JSON. */
function answers(text: string) {
  const out: { status: number; json: any; body: string }[] = [];
  const re = /HTTP\/1\.1 (\d{3})[^\r]*\r\n([\s\S]*?)\r\n\r\n/g;
  let m: RegExpExecArray | null;
  while ((m = re.exec(text))) {
    const length = /content-length: (\d+)/i.exec(m[2]!);
    const start = re.lastIndex;
    let body = "";
    if (length) body = text.slice(start, start + Number(length[1]));
    else if (/transfer-encoding: chunked/i.test(m[2]!)) {
      let at = start;
      for (;;) {
        const eol = text.indexOf("\r\n", at);
        if (eol < 0) break;
        const n = parseInt(text.slice(at, eol), 16);
        if (!n) {
          at = eol + 4;
          break;
        }
        body += text.slice(eol + 2, eol + 2 + n);
        at = eol + 2 + n + 2;
      }
      re.lastIndex = at;
    }
    if (length) re.lastIndex = start + Number(length[1]);
    let json: any = null;
    try {
      json = JSON.parse(body);
    } catch {}
    out.push({ status: Number(m[1]), json, body });
  }
  return out;
}

const errorShape = (json: any) =>
  json && typeof json.error?.code === "string" && typeof json.error?.message === "string";

async function fleetExists(id: string) {
  return (await api("GET", `/v1/fleets/${id}`)).status === 200;
}

describe("framing a real parser has to judge", () => {
  it("refuses chunked bodies that lie, and Content-Length beside Transfer-Encoding, writing nothing", async () => {
    const ids: string[] = [];
    const cases: [string, (id: string) => string][] = [
      ["a chunk longer than its size", (id) => `5\r\n{"id":"${id}"}\r\n0\r\n\r\n`],
      ["a chunk size that is not hex", (id) => `zz\r\n{"id":"${id}"}\r\n0\r\n\r\n`],
      ["a chunk size beyond 64 bits", (id) => `fffffffffffffffffff\r\n{"id":"${id}"}\r\n0\r\n\r\n`],
    ];
    const problems: string[] = [];
    for (const [name, body] of cases) {
      const id = uniq("chunk");
      ids.push(id);
      const text = await rawExchange(
        `POST /v1/fleets HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${admin}\r\n` +
          `Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n${body(id)}`,
        3_000,
      );
      for (const a of answers(text)) {
        if (a.status < 400) problems.push(`${name}: ${a.status}`);
        // wrangler dev's own proxy answers a body it cannot read as a text/plain 500 ("Network
        // connection lost") before the worker sees a request; the edge refuses such framing
        // itself. A 5xx from the worker (its JSON error shape) would be a defect.
        else if (a.status >= 500 && (errorShape(a.json) || !/Network connection lost/.test(a.body)))
          problems.push(`${name}: ${a.status} ${a.body.slice(0, 120)}`);
      }
    }
    // Both framings at once: a request smuggled behind the first must not be run as the admin's.
    const smuggled = uniq("smuggled");
    ids.push(smuggled);
    const inner = JSON.stringify({ id: smuggled });
    const smuggle =
      `POST /v1/fleets HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${admin}\r\n` +
      `Content-Type: application/json\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n` +
      `0\r\n\r\nPOST /v1/fleets HTTP/1.1\r\nHost: ${url.host}\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${inner.length}\r\nConnection: close\r\n\r\n${inner}`;
    const got = answers(await rawExchange(smuggle, 3_000));
    for (const a of got)
      if (a.status >= 500 && errorShape(a.json)) problems.push(`CL+TE: ${a.status} ${a.body.slice(0, 120)}`);
    expect(problems).toEqual([]);
    for (const id of ids) expect(await fleetExists(id), id).toBe(false);
  });

  it("answers a header block of 200 KB or 2,000 headers with a 4xx, and the next caller normally", async () => {
    const huge = await rawExchange(
      `GET /v1/status HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${admin}\r\nX-Big: ${"a".repeat(200_000)}\r\nConnection: close\r\n\r\n`,
    );
    const many = await rawExchange(
      `GET /v1/status HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${admin}\r\n` +
        Array.from({ length: 2_000 }, (_, i) => `X-H${i}: v\r\n`).join("") +
        "Connection: close\r\n\r\n",
    );
    for (const [name, text] of [
      ["200 KB", huge],
      ["2,000 headers", many],
    ] as const) {
      const got = answers(text);
      // A parser may also just hang up; what it must not do is answer 5xx.
      for (const a of got) expect([name, a.status >= 500]).toEqual([name, false]);
    }
    expect((await api("GET", "/v1/status")).status).toBe(200);
  });

  it("refuses bytes fetch() would not send in the Authorization header (NUL, UTF-8, DEL) with 401 in the error shape", async () => {
    const problems: string[] = [];
    for (const value of [
      "Bearer a\u0000b",
      `Bearer ${admin}\u00ff`,
      "Bearer \u00e9t\u00e9",
      `Bearer ${admin}\u007f`,
      "Bearer",
      "bearer  ",
    ]) {
      const text = await rawExchange(
        Buffer.concat([
          Buffer.from(`POST /v1/fleets HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: `),
          Buffer.from(value, value.includes("\u00e9") ? "utf8" : "latin1"),
          Buffer.from(`\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`),
        ]),
      );
      const [a] = answers(text);
      // A parser may refuse the header itself (400) before the worker sees it.
      if (!a) continue;
      if (a.status !== 401 && a.status !== 400) problems.push(`${JSON.stringify(value)} → ${a.status}`);
      else if (a.status === 401 && !errorShape(a.json))
        problems.push(`${JSON.stringify(value)}: ${a.body.slice(0, 100)}`);
    }
    expect(problems).toEqual([]);
  });
  it("answers pipelined requests on one connection each with its own credential: the admin's does not carry over", async () => {
    const id = uniq("pipe");
    const body = JSON.stringify({ id });
    const text = await rawExchange(
      `GET /v1/status HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${admin}\r\n\r\n` +
        `POST /v1/fleets HTTP/1.1\r\nHost: ${url.host}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}` +
        `GET /v1/tokens HTTP/1.1\r\nHost: ${url.host}\r\nConnection: close\r\n\r\n`,
      5_000,
      3,
    );
    const got = answers(text);
    expect(got.map((a) => a.status)).toEqual([200, 401, 401]);
    expect(errorShape(got[1]!.json) && errorShape(got[2]!.json)).toBe(true);
    expect(await fleetExists(id)).toBe(false);
  });

  it("answers Expect: 100-continue whose body never follows without holding anyone else, and writes nothing", async () => {
    const id = uniq("expect");
    const socket = connect(Number(url.port), url.hostname);
    socket.on("error", () => {});
    await new Promise<void>((r) => socket.on("connect", () => r()));
    socket.write(
      `POST /v1/fleets HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${admin}\r\n` +
        `Content-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n`,
    );
    await sleep(500);
    const at = Date.now();
    expect((await api("GET", "/v1/status")).status).toBe(200);
    expect(Date.now() - at).toBeLessThan(2_000);
    socket.destroy();
    await sleep(300);
    expect(await fleetExists(id)).toBe(false);
  });
});

describe("path parameters that try to leave their segment", () => {
  it("never reach another resource: %2F, .., %00, raw UTF-8, overlong and mixed encodings", async () => {
    const fleet = uniq("path");
    expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
    const s = (await api("POST", "/v1/servers", { fleet, hostname: `${fleet}.example.com`, kind: "managed" })).json;
    const targets = [
      `/v1/fleets/${fleet}%2F..%2F..%2Fv1%2Ftokens`,
      `/v1/fleets/..%2Fv1%2Ftokens`,
      `/v1/fleets/%2e%2e/tokens`,
      `/v1/fleets/${fleet}/../../v1/tokens`,
      `/v1/servers/${s.id}%2F..%2F..%2Ftokens`,
      `/v1/servers/${s.id}%00`,
      `/v1/servers/%C0%AE%C0%AE%2Ftokens`,
      `/v1/servers/${fleet}%2F${fleet}.example.com%2F..`,
      `/v1/fleets/\u00e9t\u00e9`,
      `/v1/fleets/%E2%80%AE${fleet}`,
      `/v1/fleets/%ED%A0%80`,
      `/v1/fleets/${"a".repeat(60_000)}`,
      `/v1/agent/download/..%2F..%2Fwrangler.toml`,
      `/v1/agent/download/%2e%2e%2f%2e%2e%2fpackage.json`,
      `/v1/agent/download/..\\..\\package.json`,
      `/v1/images/..%2F..%2Fv1%2Ftokens/parts/1`,
      `/v1/audit/days/..%2F..%2Fv1%2Ftokens`,
      `/v1/audit/days/2026-01-01%2F..%2F..`,
    ];
    const problems: string[] = [];
    let resolvedSeen = 0;
    for (const path of targets) {
      for (const method of ["GET", "DELETE"]) {
        const text = await rawExchange(
          Buffer.from(
            `${method} ${path} HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${admin}\r\nConnection: close\r\n\r\n`,
            "utf8",
          ),
        );
        const [a] = answers(text);
        const where = `${method} ${path.slice(0, 80)}`;
        // A dot segment, even percent-encoded, is resolved by the URL standard before routing: the
        // request is then for the resolved path, with the same credential, and must answer as that does.
        const resolved = new URL(path, url).pathname;
        if (resolved.split("/").length !== path.split("/").length && !path.includes("%2F") && !path.includes("\\")) {
          const direct = answers(
            await rawExchange(
              `${method} ${resolved} HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${admin}\r\nConnection: close\r\n\r\n`,
            ),
          )[0];
          if (a?.status !== direct?.status)
            problems.push(`${where} → ${a?.status}, but ${resolved} → ${direct?.status}`);
          resolvedSeen++;
          continue;
        }
        if (!a) {
          problems.push(`${where}: no answer`);
          continue;
        }
        if (a.status >= 500 || a.status < 400) problems.push(`${where} → ${a.status} ${a.body.slice(0, 120)}`);
        else if (!errorShape(a.json) && a.status !== 400)
          problems.push(`${where} → ${a.status}: ${a.body.slice(0, 120)}`);
        // Nothing of the token list, the repository or another resource comes back.
        if (/"items"|\[package\]|compatibility_date|"devDependencies"/.test(a.body))
          problems.push(`${where} leaked: ${a.body.slice(0, 120)}`);
      }
    }
    expect(problems).toEqual([]);
    expect(resolvedSeen).toBeGreaterThan(0);
    expect((await api("GET", `/v1/fleets/${fleet}`)).status).toBe(200);
    expect((await api("GET", `/v1/servers/${s.id}`)).json.lifecycle).toBeNull();
  });
});

describe("what the document walks miss, with every wrong credential: upgrades, console forms, rotated host tokens", () => {
  let fleet: string;
  let server: { id: string; token: string };
  let oldServerToken: string;
  let readToken: string;
  let otherFleetToken: string;
  let revokedToken: string;
  let enrollToken: string;

  beforeAll(async () => {
    fleet = uniq("outside");
    expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
    expect((await api("POST", "/v1/fleets", { id: `${fleet}-b` })).status).toBe(201);
    server = (await api("POST", "/v1/servers", { fleet, hostname: `${fleet}.example.com`, kind: "managed" })).json;
    oldServerToken = server.token;
    server.token = (await api("POST", `/v1/servers/${server.id}/token`)).json.token;
    readToken = (await api("POST", "/v1/tokens", { name: "probe-read", scope: "read" })).json.token;
    otherFleetToken = (await api("POST", "/v1/tokens", { name: "probe-b", scope: "admin", fleets: [`${fleet}-b`] }))
      .json.token;
    const revoked = (await api("POST", "/v1/tokens", { name: "probe-revoked", scope: "admin" })).json;
    expect((await api("DELETE", `/v1/tokens/${revoked.id}`)).status).toBe(200);
    revokedToken = revoked.token;
    enrollToken = (
      await api("POST", `/v1/fleets/${fleet}/enrollment-tokens`, {
        name: "probe",
        expires_at: new Date(Date.now() + 3_600_000).toISOString(),
      })
    ).json.token;
  });

  /** A WebSocket upgrade over a raw socket: the status line and body of the answer. */
  async function upgrade(path: string, headers: Record<string, string>) {
    const text = await rawExchange(
      `GET ${path} HTTP/1.1\r\nHost: ${url.host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
        `Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: ${Buffer.from("0123456789abcdef").toString("base64")}\r\n` +
        Object.entries(headers)
          .map(([k, v]) => `${k}: ${v}\r\n`)
          .join("") +
        "\r\n",
      2_000,
    );
    return answers(text)[0] ?? { status: 0, json: null, body: text.slice(0, 200) };
  }

  it("refuses the host channel's upgrade to every token but the server's current one", async () => {
    const cases: [string, Record<string, string>, number][] = [
      ["no token", {}, 401],
      ["garbage", { Authorization: "Bearer garbage" }, 401],
      ["Basic", { Authorization: `Basic ${Buffer.from(`x:${server.token}`).toString("base64")}` }, 401],
      ["rotated-away server token", { Authorization: `Bearer ${oldServerToken}` }, 401],
      [
        "rotated-away token as subprotocol",
        { "Sec-WebSocket-Protocol": `harbormaster.v1, hm-token.${oldServerToken}` },
        401,
      ],
      ["admin", { Authorization: `Bearer ${admin}` }, 403],
      ["read token", { Authorization: `Bearer ${readToken}` }, 403],
      ["revoked operator token", { Authorization: `Bearer ${revokedToken}` }, 401],
      ["enrollment token", { Authorization: `Bearer ${enrollToken}` }, 401],
    ];
    const problems: string[] = [];
    for (const [name, headers, status] of cases) {
      const a = await upgrade("/v1/agent/channel", headers);
      if (a.status !== status || !errorShape(a.json)) problems.push(`${name} → ${a.status} ${a.body.slice(0, 100)}`);
    }
    expect(problems).toEqual([]);
    // The current token is let in (101), so the refusals above were about the tokens.
    expect((await upgrade("/v1/agent/channel", { Authorization: `Bearer ${server.token}` })).status).toBe(101);
  });

  it("refuses a rotated-away server token on every host route (401), and takes the current one", async () => {
    const report = JSON.stringify({
      generation: 1,
      reconciled_at: new Date().toISOString(),
      boot_id: "b",
      agents: [],
      errors: [],
      assignments: { units: [], storage: [] },
    });
    const routes: [string, string, string | undefined][] = [
      ["GET", "/v1/agent/desired", undefined],
      ["GET", "/v1/agent/desired?wait=5", undefined],
      ["PUT", "/v1/agent/inventory", report],
      ["GET", `/v1/agent/images/${crypto.randomUUID()}/blob`, undefined],
    ];
    const problems: string[] = [];
    for (const [method, path, body] of routes) {
      for (const [name, token, want] of [
        ["rotated-away", oldServerToken, 401],
        ["enrollment token", enrollToken, 401],
        ["admin", admin, 403],
      ] as const) {
        const res = await fetch(new URL(path, url), {
          method,
          headers: { authorization: `Bearer ${token}`, ...(body ? { "content-type": "application/json" } : {}) },
          body,
        });
        const json = await res.json().catch(() => null);
        if (res.status !== want || !errorShape(json)) problems.push(`${name}: ${method} ${path} → ${res.status}`);
      }
    }
    expect(problems).toEqual([]);
    const current = await fetch(new URL("/v1/agent/desired", url), {
      headers: { authorization: `Bearer ${server.token}` },
    });
    expect(current.status).toBe(200);
    await current.body?.cancel();
  });

  it("refuses the console's live socket without a session, from another origin, or for a fleet the session may not see", async () => {
    const cases: [string, Record<string, string>, string, number][] = [
      ["no session", { Origin: url.origin }, `/console/live?fleet=${fleet}`, 401],
      [
        "a bearer instead of a session",
        { Origin: url.origin, Authorization: `Bearer ${admin}` },
        `/console/live?fleet=${fleet}`,
        401,
      ],
      [
        "a forged session cookie",
        { Origin: url.origin, Cookie: `__Host-hm_session=${"A".repeat(43)}` },
        `/console/live?fleet=${fleet}`,
        401,
      ],
      ["another origin", { Origin: "https://evil.example" }, `/console/live?fleet=${fleet}`, 403],
    ];
    const problems: string[] = [];
    for (const [name, headers, path, status] of cases) {
      const a = await upgrade(path, headers);
      if (a.status !== status) problems.push(`${name} → ${a.status} ${a.body.slice(0, 100)}`);
    }
    expect(problems).toEqual([]);
  });

  it("refuses every console form to a caller with no session, a bearer token, or a forged cookie, changing nothing", async () => {
    const rollout = crypto.randomUUID();
    const forms = [
      ...["decommission", "decommission/cancel", "refresh", "token"].map((a) => `/console/servers/${server.id}/${a}`),
      ...["pause", "resume", "resize", "release"].map((a) => `/console/groups/default/${a}?fleet=${fleet}`),
      `/console/enrollment/create?fleet=${fleet}`,
      `/console/enrollment/${crypto.randomUUID()}/revoke?fleet=${fleet}`,
      ...["fix", "dry-run", "fix-holds/release"].map((a) => `/console/drift/${a}?fleet=${fleet}`),
      ...["cancel", "pause", "resume", "rollback"].map((a) => `/console/rollouts/${rollout}/${a}`),
      `/console/sessions/${crypto.randomUUID()}/end`,
      "/console/sessions",
      "/console/sign-out",
    ];
    const problems: string[] = [];
    let sent = 0;
    for (const path of forms) {
      for (const [name, headers] of [
        ["no session", {}],
        ["bearer", { Authorization: `Bearer ${admin}` }],
        ["forged cookie", { Cookie: `__Host-hm_session=${"A".repeat(43)}` }],
        ["read token's bearer", { Authorization: `Bearer ${readToken}` }],
        ["other fleet's bearer", { Authorization: `Bearer ${otherFleetToken}` }],
      ] as const) {
        const res = await fetch(new URL(path, url), {
          method: "POST",
          redirect: "manual",
          headers: { "Content-Type": "application/x-www-form-urlencoded", Origin: url.origin, ...headers },
          body: "_csrf=x&reason=probe&name=probe",
        });
        sent++;
        // Refused (401/403), or sent to sign in (303), or no such page (404/405); never done, never a 500.
        if (![401, 403, 303, 404, 405].includes(res.status)) problems.push(`${name}: POST ${path} → ${res.status}`);
        await res.body?.cancel();
      }
    }
    expect(problems).toEqual([]);
    expect(sent).toBe(forms.length * 5);
    const got = (await api("GET", `/v1/servers/${server.id}`)).json;
    expect(got.lifecycle).toBeNull();
    const audit = (await api("GET", `/v1/audit?target=server:${server.id}&limit=100`)).json.items as any[];
    expect(audit.map((e) => e.action).filter((a) => a !== "server.register" && a !== "server.token.rotate")).toEqual(
      [],
    );
  });
  /** Signs in through the console's form as a browser would; the session cookie and the page's CSRF token. */
  async function signIn(token: string) {
    const cookieOf = (res: Response, name: string) =>
      res.headers
        .getSetCookie()
        .map((l) => l.split(";")[0]!)
        .find((p) => p.split("=")[0]!.endsWith(name))!;
    const page = await fetch(new URL("/console/sign-in", url));
    const signin = cookieOf(page, "hm_signin");
    const csrf = /name="_csrf" value="([^"]+)"/.exec(await page.text())![1]!;
    const res = await fetch(new URL("/console/sign-in", url), {
      method: "POST",
      redirect: "manual",
      headers: { "Content-Type": "application/x-www-form-urlencoded", Origin: url.origin, Cookie: signin },
      body: new URLSearchParams({ _csrf: csrf, token, next: "/console" }).toString(),
    });
    expect(res.status).toBe(303);
    const cookie = cookieOf(res, "hm_session");
    const audit = await fetch(new URL("/console/audit", url), { headers: { Cookie: cookie } });
    return { cookie, csrf: /data-csrf="([^"]+)"/.exec(await audit.text())![1]! };
  }

  it("refuses every console form sent with a real session but a wrong CSRF token or from another origin (403); a read session's changes nothing", async () => {
    const adminSession = await signIn(admin);
    const readSession = await signIn(readToken);
    const writes = [
      ...["decommission", "refresh", "token"].map((a) => `/console/servers/${server.id}/${a}`),
      ...["pause", "resize"].map((a) => `/console/groups/default/${a}?fleet=${fleet}`),
      `/console/enrollment/create?fleet=${fleet}`,
      `/console/drift/fix?fleet=${fleet}`,
    ];
    const problems: string[] = [];
    let sent = 0;
    for (const path of writes) {
      for (const [name, session, csrf, origin] of [
        ["wrong CSRF", adminSession, "A".repeat(43), url.origin],
        ["no CSRF", adminSession, "", url.origin],
        ["another origin", adminSession, adminSession.csrf, "https://evil.example"],
        ["no Origin", adminSession, adminSession.csrf, null],
        ["read session", readSession, readSession.csrf, url.origin],
      ] as const) {
        const res = await fetch(new URL(path, url), {
          method: "POST",
          redirect: "manual",
          headers: {
            "Content-Type": "application/x-www-form-urlencoded",
            Cookie: session.cookie,
            ...(origin ? { Origin: origin } : {}),
          },
          body: new URLSearchParams({ _csrf: csrf, slots: "3", name: "probe", reason: "probe" }).toString(),
        });
        sent++;
        // The guard refuses a forged form outright (403). A read session's form passes the guard and
        // reaches the API, whose 403 the console shows as the page's message (303 back, or the form
        // again): what matters is that nothing below changed.
        const ok = name === "read session" ? [303, 200, 403] : [403];
        if (!ok.includes(res.status)) problems.push(`${name}: POST ${path} → ${res.status}`);
        await res.body?.cancel();
      }
    }
    expect(problems).toEqual([]);
    expect(sent).toBe(writes.length * 5);
    expect((await api("GET", `/v1/servers/${server.id}`)).json.lifecycle).toBeNull();
    expect((await api("GET", `/v1/fleets/${fleet}/enrollment-tokens`)).json.items).toHaveLength(1);
    const audit = (await api("GET", `/v1/audit?target=server:${server.id}&limit=100`)).json.items as any[];
    expect(audit.map((e) => e.action).filter((a) => a !== "server.register" && a !== "server.token.rotate")).toEqual(
      [],
    );
  });
});

describe("FleetLock with another fleet's key", () => {
  it("refuses it on every endpoint of the fleet (403), the key's own fleet untouched too", async () => {
    const a = uniq("fla");
    const b = uniq("flb");
    for (const f of [a, b]) expect((await api("POST", "/v1/fleets", { id: f })).status).toBe(201);
    const baseA = (await api("POST", `/v1/fleets/${a}/fleetlock-key`)).json.base_url as string;
    expect((await api("POST", `/v1/fleets/${b}/fleetlock-key`)).status).toBe(201);
    const keyA = new URL(baseA).pathname.split("/")[3]!;
    for (const f of [a, b]) {
      const r = await api("POST", "/v1/servers", {
        fleet: f,
        hostname: `n.${f}.example.com`,
        kind: "managed",
        fleetlock_id: "node-1",
      });
      expect(r.status).toBe(201);
    }
    const problems: string[] = [];
    for (const path of ["v1/pre-reboot", "default/v1/pre-reboot", "v1/steady-state", "default/v1/steady-state"]) {
      const res = await fetch(new URL(`/fleetlock/${b}/${keyA}/${path}`, url), {
        method: "POST",
        headers: { "fleet-lock-protocol": "true" },
        body: JSON.stringify({ client_params: { id: "node-1", group: "default" } }),
      });
      const json = (await res.json()) as any;
      if (res.status !== 403 || typeof json.kind !== "string")
        problems.push(`${path} → ${res.status} ${JSON.stringify(json)}`);
    }
    expect(problems).toEqual([]);
    // No group got a holder, nor came into being, in either fleet.
    for (const f of [a, b]) expect((await api("GET", `/v1/fleets/${f}/reboot-groups`)).json.items).toEqual([]);
  });
});

describe("channel frames no agent sends, over the real socket", () => {
  it("answers binary, garbage, 2 MiB and 20 MiB frames with an error or a close, and keeps serving everyone", async () => {
    const fleet = uniq("frames");
    expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
    const s = (await api("POST", "/v1/servers", { fleet, hostname: `${fleet}.example.com`, kind: "managed" })).json;
    expect((await api("PUT", `/v1/servers/${s.id}/desired`, { generation: 2, agents: [] })).status).toBe(200);
    const before = (await api("GET", `/v1/servers/${s.id}`)).json;
    const ws = new WebSocket(new URL("/v1/agent/channel", url.href.replace(/^http/, "ws")), [
      "harbormaster.v1",
      `hm-token.${s.token}`,
    ]);
    const messages: any[] = [];
    let closed: { code: number } | null = null;
    ws.addEventListener("message", (e) => messages.push(JSON.parse(String(e.data))));
    ws.addEventListener("close", (e) => void (closed = { code: e.code }));
    await new Promise<void>((resolve, reject) => {
      ws.addEventListener("open", () => resolve());
      ws.addEventListener("error", () => reject(new Error("channel did not open")));
    });
    // A refused frame is answered as an error, or a report the HTTP route would refuse as an ack of that refusal.
    const errors = () => messages.filter((m) => m.type === "error" || (m.type === "ack" && m.status >= 400)).length;
    const sends: [string, string | Uint8Array][] = [
      ["binary", new Uint8Array([0, 1, 2, 255])],
      ["garbage", "\u0000\ud800{"],
      [
        "valid JSON of the wrong shape",
        JSON.stringify({ type: "report", v: 1, id: "x", report: { generation: "two" } }),
      ],
      ["2 MiB", JSON.stringify({ type: "report", v: 1, id: "big", report: { pad: "x".repeat(2 * 1024 * 1024) } })],
    ];
    for (const [name, frame] of sends) {
      const had = errors();
      ws.send(frame);
      const deadline = Date.now() + 5_000;
      while (errors() === had && !closed && Date.now() < deadline) await sleep(20);
      expect([name, errors() > had || closed !== null]).toEqual([name, true]);
    }
    // Beyond what the runtime takes in one frame: the socket may close, the server must not fall over.
    if (!closed) ws.send(new Uint8Array(20 * 1024 * 1024));
    await sleep(1_000);
    ws.close();
    if (closed) expect((closed as { code: number }).code).not.toBe(1011);
    expect((await api("GET", "/v1/status")).status).toBe(200);
    const after = (await api("GET", `/v1/servers/${s.id}`)).json;
    expect(after.reported_generation ?? null).toBe(before.reported_generation ?? null);
    expect(after.status).toBe(before.status);
  });
});
