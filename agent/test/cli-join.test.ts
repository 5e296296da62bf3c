import { existsSync, statSync } from "node:fs";
import { afterAll, describe, expect, it } from "vitest";
import { agentCmd, json, scriptedServer, tempHost } from "./cli-helpers.ts";

const TOKEN = "hme.tok1.s3cret";
const answer = (body: Record<string, unknown>) => ({
  id: "srv-1",
  fleet: "prod",
  hostname: body.hostname,
  reboot_group: "rack-a",
  fleetlock_id: body.fleetlock_id,
  token: "hms.srv-1.servertoken",
});

const server = await scriptedServer((req, res) => {
  if (req.method !== "POST" || req.url !== "/v1/agent/enroll")
    return json(res, 404, { error: { code: "not_found", message: "no" } });
  if (req.headers.authorization === "Bearer hme.dead.token")
    return json(res, 401, { error: { code: "unauthorized", message: "enrollment token expired" } });
  json(res, 201, answer(JSON.parse(req.body.toString())));
});
afterAll(() => server.close());

describe("harbormaster-agent join", () => {
  it("enrolls with the machine id and boot id, and keeps the identity readable by root only", async () => {
    const host = tempHost();
    const r = await agentCmd(["join", server.url, TOKEN, "--hostname", "web-1"], host.env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/joined fleet prod as web-1 \(server srv-1\)/);
    const req = server.requests.at(-1)!;
    expect(req.headers.authorization).toBe(`Bearer ${TOKEN}`);
    expect(JSON.parse(req.body.toString())).toEqual({
      hostname: "web-1",
      machine_id: "0123456789abcdef0123456789abcdef",
      boot_id: "11111111-2222-3333-4444-555555555555",
      fleetlock_id: "0123456789abcdef0123456789abcdef",
    });
    expect(statSync(host.stateDir).mode & 0o777).toBe(0o700);
    expect(statSync(`${host.stateDir}/identity.json`).mode & 0o777).toBe(0o600);

    const status = await agentCmd(["status", "--json"], host.env);
    const view = JSON.parse(status.stdout);
    expect(view.joined).toMatchObject({
      url: server.url,
      server_id: "srv-1",
      fleet: "prod",
      hostname: "web-1",
      reboot_group: "rack-a",
    });
    // status never shows the server token
    expect(status.stdout).not.toContain("servertoken");
  });

  it("sends each --label in the enroll body, the last value of a repeated key winning", async () => {
    const host = tempHost();
    const r = await agentCmd(
      ["join", server.url, TOKEN, "--label", "zone=eu-1a", "--label", "rack=r1", "--label", "rack=r12"],
      host.env,
    );
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(server.requests.at(-1)!.body.toString()).labels).toEqual({ zone: "eu-1a", rack: "r12" });
  });

  it("sends a --label named __proto__ as a key, for the server to judge, instead of dropping it", async () => {
    const host = tempHost();
    await agentCmd(["join", server.url, TOKEN, "--label", "__proto__=x", "--label", "constructor=y"], host.env);
    const body = server.requests.at(-1)!.body.toString();
    expect(body).toContain('"labels":{"__proto__":"x","constructor":"y"}');
  });

  it("refuses a --label that is not key=value before calling anyone", async () => {
    const host = tempHost();
    const before = server.requests.length;
    const r = await agentCmd(["join", server.url, TOKEN, "--label", "zone"], host.env);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/--label takes key=value \(e\.g\. zone=eu-1a\), not 'zone'/);
    expect(server.requests.length).toBe(before);
    expect(() => statSync(`${host.stateDir}/identity.json`)).toThrow();
  });

  it("run twice, says it is already joined and enrolls nothing more", async () => {
    const host = tempHost();
    expect((await agentCmd(["join", server.url, TOKEN, "--fleetlock-id", "fl-7"], host.env)).code).toBe(0);
    const before = server.requests.length;
    const again = await agentCmd(["join", server.url, TOKEN], host.env);
    expect(again.code).toBe(0);
    expect(again.stdout).toMatch(/already joined fleet prod/);
    expect(server.requests.length).toBe(before);
  });

  it("reads the token from standard input with -, and takes --state-dir over the environment", async () => {
    const host = tempHost();
    const r = await agentCmd(
      ["join", server.url, "-", "--state-dir", `${host.root}/elsewhere`],
      host.env,
      `${TOKEN}\n`,
    );
    expect(r.code, r.stderr).toBe(0);
    expect(statSync(`${host.root}/elsewhere/identity.json`).isFile()).toBe(true);
  });

  it("says why a refused token failed, and keeps nothing", async () => {
    const host = tempHost();
    const r = await agentCmd(["join", server.url, "hme.dead.token"], host.env);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^<3>join failed: the enrollment token was refused .*enrollment token expired/m);
    expect(() => statSync(`${host.stateDir}/identity.json`)).toThrow();
  });

  it("refuses a token of the wrong shape before calling anyone", async () => {
    const host = tempHost();
    const before = server.requests.length;
    const r = await agentCmd(["join", server.url, "hms.a.b"], host.env);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/hme\.<id>\.<secret>/);
    expect(server.requests.length).toBe(before);
  });

  it("run before join stops with 78 and says how to join", async () => {
    const host = tempHost();
    const r = await agentCmd(["run"], host.env);
    expect(r.code).toBe(78);
    expect(r.stderr).toMatch(/not joined: run `harbormaster-agent join URL TOKEN` first/);
  });
});

// A captive portal, a proxy, a server of another version: 2xx, but no enrollment in the body.
const impostor = await scriptedServer((req, res) => {
  if (req.headers.authorization === "Bearer hme.html.page") {
    res.writeHead(200, { "Content-Type": "text/html" });
    return res.end("<html>sign in to the hotel wifi</html>");
  }
  json(res, 201, { id: "srv-1", token: "hms.srv-1.servertoken", fleet: 7 });
});
afterAll(() => impostor.close());

describe("harbormaster-agent join against something answering in the server's place", () => {
  it("says the answer is not JSON, and writes no identity", async () => {
    const host = tempHost();
    const r = await agentCmd(["join", impostor.url, "hme.html.page"], host.env);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(
      /join failed: the answer from http:\S+ is not JSON \(HTTP 200, text\/html\): is it Harbormaster's URL\?/,
    );
    expect(existsSync(`${host.stateDir}/identity.json`)).toBe(false);
  });

  it("refuses JSON that is not an enrollment, naming what is missing, and writes no identity", async () => {
    const host = tempHost();
    const r = await agentCmd(["join", impostor.url, TOKEN], host.env);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/is not an enrollment: fleet: .*; hostname: /);
    expect(r.stderr).not.toContain("servertoken");
    expect(existsSync(`${host.stateDir}/identity.json`)).toBe(false);
  });
});
