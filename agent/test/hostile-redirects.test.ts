/**
 * A control plane (or a proxy in its place) that answers the agent's calls with a redirect. The
 * server never redirects a host call, and fetch() follows redirects by itself: to another origin
 * it drops the token, so what comes back there is no one's the agent authenticated to, yet it
 * would be taken as the desired config, a report's acceptance, an image's bytes or an identity.
 * Each call refuses the redirect as an error saying where it pointed, and nothing changes.
 */
import { createHash } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { existsSync } from "node:fs";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { HostAgent, type AgentEvent } from "../agent.ts";
import { BlobFetcher } from "../drivers/download.ts";
import { HostApi } from "../host-api.ts";
import { ApiError } from "../http.ts";
import { MemoryDriver } from "../memory-driver.ts";
import { agentCmd, tempHost } from "./cli-helpers.ts";
import { tempDir } from "./helpers.ts";

const closers: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0)) await c();
});

interface Seen {
  method: string;
  url: string;
  authorization: string | null;
}

/** A server on `host` that records each request (its body read) and answers with `handle`. */
async function server(host: string, handle: (req: IncomingMessage, res: ServerResponse, n: number) => void) {
  const seen: Seen[] = [];
  const s: Server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      seen.push({ method: req.method!, url: req.url!, authorization: req.headers.authorization ?? null });
      handle(req, res, seen.length - 1);
    });
  });
  await new Promise<void>((r) => s.listen(0, host, r));
  closers.push(() => new Promise<void>((r) => (s.closeAllConnections(), s.close(() => r()))));
  return { url: `http://${host}:${(s.address() as AddressInfo).port}`, seen };
}

const json = (res: ServerResponse, status: number, body: unknown) =>
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));

/** What a third party, reached through the redirect without the token, offers to run. */
const foreignConfig = {
  server_id: "srv-1",
  generation: 9,
  lifecycle: "run",
  agents: [{ name: "miner", image: "miner", version: "6.6.6", instance_id: "i-x" }],
};

/** Another origin (127.0.0.2: another host, to fetch()) that answers everything as if it were the server. */
const foreign = () =>
  server("127.0.0.2", (req, res) => {
    if (req.url!.startsWith("/v1/agent/desired")) return json(res, 200, foreignConfig);
    if (req.url!.startsWith("/v1/agent/inventory"))
      return json(res, 200, { server_id: "srv-1", desired_generation: 9, status: "realized", agents: [] });
    if (req.url!.startsWith("/v1/agent/enroll"))
      return json(res, 200, { id: "srv-x", fleet: "f", hostname: "h", token: "hms.foreign" });
    res.writeHead(200).end(Buffer.from("not the image"));
  });

const redirect = (res: ServerResponse, status: number, to: string) => res.writeHead(status, { location: to }).end();

describe("a desired config answered with a redirect to another origin", () => {
  it("is refused with the redirect's target named, and what the other origin offers is never run", async () => {
    const other = await foreign();
    const cp = await server("127.0.0.1", (req, res) => {
      if (req.url!.startsWith("/v1/agent/desired")) return redirect(res, 307, `${other.url}/v1/agent/desired`);
      json(res, 404, { error: { code: "not_found", message: "no" } });
    });
    const driver = new MemoryDriver();
    const events: AgentEvent[] = [];
    const stop = new AbortController();
    const agent = new HostAgent({
      url: cp.url,
      token: "hms.srv-1.secret",
      driver,
      bootId: "boot-a",
      transport: "http",
      minPollIntervalMs: 1,
      backoff: { baseMs: 10, capMs: 20 },
      random: () => 0,
      onEvent: (e) => events.push(e),
    });
    const exit = agent.run(stop.signal);
    closers.push(async () => {
      stop.abort();
      await exit;
    });
    const deadline = Date.now() + 5_000;
    while (events.filter((e) => e.type === "error").length < 3 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 20));
    stop.abort();
    await exit;

    expect(driver.installed.size).toBe(0);
    expect(other.seen).toEqual([]);
    const errors = events.filter((e) => e.type === "error").map((e) => (e as { error: ApiError }).error);
    expect(errors.length).toBeGreaterThanOrEqual(3);
    expect(errors[0]).toBeInstanceOf(ApiError);
    expect(errors[0].code).toBe("redirected");
    expect(errors[0].message).toContain(`${other.url}/v1/agent/desired`);
    // Backed off as from any failed call, not polled in a busy loop.
    expect(errors.map((e, i) => (events.filter((x) => x.type === "error")[i] as { attempt: number }).attempt)).toEqual(
      errors.map((_, i) => i + 1),
    );
  });
});

describe("a report answered 303 See Other", () => {
  it("is not taken as accepted: fetch's GET of the new place is never read as the report's answer", async () => {
    const other = await foreign();
    const cp = await server("127.0.0.1", (req, res) => redirect(res, 303, `${other.url}/v1/agent/inventory`));
    const api = new HostApi(cp.url, "hms.srv-1.secret");
    const report = {
      generation: 1,
      reconciled_at: new Date().toISOString(),
      boot_id: "b",
      agents: [],
      errors: [],
      assignments: { units: [], storage: [] },
    };
    const err = await api.report(report).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).status).toBe(303);
    expect((err as ApiError).code).toBe("redirected");
    expect(other.seen).toEqual([]);
  });
});

describe("an image's blob answered with a redirect", () => {
  it("is a refusal, not retried: nothing downloaded, the other origin never asked", async () => {
    const other = await foreign();
    const cp = await server("127.0.0.1", (req, res) => redirect(res, 302, `${other.url}/elsewhere`));
    const cache = await tempDir("hm-redirect-cache-");
    closers.push(() => rm(cache, { recursive: true, force: true }));
    const blobs = new BlobFetcher({ baseUrl: cp.url, token: "hms.srv-1.secret", cacheDir: cache, retryDelayMs: 1 });
    const digest = `sha256:${createHash("sha256").update("not the image").digest("hex")}`;
    const err = await blobs.fetch("/v1/agent/images/img-1/blob", digest, 13).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).code).toBe("redirected");
    expect(cp.seen).toHaveLength(1);
    expect(other.seen).toEqual([]);
    expect(existsSync(blobs.pathOf(digest))).toBe(false);
  });
});

describe("an image whose blob path names another host", () => {
  it("is refused before any request: the token goes to the server's own origin only", async () => {
    const other = await foreign();
    const cp = await server("127.0.0.1", (req, res) => res.writeHead(404).end());
    const cache = await tempDir("hm-foreign-blob-");
    closers.push(() => rm(cache, { recursive: true, force: true }));
    const blobs = new BlobFetcher({ baseUrl: cp.url, token: "hms.srv-1.secret", cacheDir: cache, retryDelayMs: 1 });
    const digest = `sha256:${createHash("sha256").update("not the image").digest("hex")}`;
    // A path that begins with two slashes is another host's (protocol-relative), not this one's.
    const path = `//${other.url.replace(/^http:\/\//, "")}/v1/agent/images/img-1/blob`;
    const err = await blobs.fetch(path, digest, 13).catch((e: unknown) => e);
    expect(String(err)).toMatch(/not on the control plane/);
    expect(other.seen).toEqual([]);
    expect(cp.seen).toEqual([]);
  });
});

describe("an enrollment answered with a redirect", () => {
  it("fails saying where it pointed, and writes no identity", async () => {
    const other = await foreign();
    const cp = await server("127.0.0.1", (req, res) => redirect(res, 308, `${other.url}/v1/agent/enroll`));
    const h = tempHost("hm-redirect-join");
    closers.push(() => rm(h.root, { recursive: true, force: true }));
    const r = await agentCmd(["join", cp.url, "hme.fleet.0123456789abcdef"], h.env);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain(`${other.url}/v1/agent/enroll`);
    expect(other.seen).toEqual([]);
    expect(existsSync(join(h.stateDir, "identity.json"))).toBe(false);
  });
});
