/**
 * The loop against a control plane that lies or hangs: malformed or oversized desired configs
 * and channel messages, a socket that never finishes its upgrade. The agent must keep running,
 * keep what it had, say what went wrong, and retry.
 */
import { createHash } from "node:crypto";
import { createServer, type Server, type Socket } from "node:net";
import { createServer as createHttpServer, type Server as HttpServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { CHANNEL_VERSION } from "../../src/domain/channel.ts";
import { MAX_AGENTS } from "../../src/domain/limits.ts";
import { HostAgent, type AgentEvent, type AgentExit } from "../agent.ts";
import { ChannelConnection, webSocketConnector, type ChannelConnector, type ChannelSocket } from "../channel.ts";
import { MESSAGE_TOO_BIG, wsConnector } from "../channel-ws.ts";
import { MAX_INVALID_IN_A_ROW } from "../channel-session.ts";
import { HostApi } from "../host-api.ts";
import { ApiError } from "../http.ts";
import { MemoryDriver } from "../memory-driver.ts";
import { MAX_DESIRED_AGENTS } from "../protocol.ts";

const accepted = (generation: number) => ({
  server_id: "srv-1",
  desired_generation: generation,
  status: "realized",
  agents: [],
});

const goodConfig = (generation: number) => ({
  server_id: "srv-1",
  generation,
  lifecycle: "run",
  agents: [{ name: "node-exporter", image: "node-exporter", version: "1.8.0", instance_id: "i-1" }],
});

/** A socket the test scripts: `serverSends` on connect, acks to every report. */
function fakeChannel(serverSends: unknown[]) {
  const reports: { generation: number }[] = [];
  const connect: ChannelConnector = async () => {
    const listeners: Record<string, ((e: any) => void)[]> = { message: [], close: [], error: [] };
    const deliver = (data: string) => setTimeout(() => listeners.message.forEach((l) => l({ data })), 0);
    const socket: ChannelSocket = {
      send(data: string) {
        if (data === "ping") return deliver("pong");
        const m = JSON.parse(data);
        if (m.type === "report") {
          reports.push(m.report);
          deliver(
            JSON.stringify({
              type: "ack",
              v: CHANNEL_VERSION,
              id: m.id,
              status: 200,
              body: accepted(m.report.generation),
            }),
          );
        }
      },
      close(code = 1000, reason = "") {
        setTimeout(() => listeners.close.forEach((l) => l({ code, reason })), 0);
      },
      addEventListener(type: string, l: (e: any) => void) {
        listeners[type].push(l);
      },
    } as ChannelSocket;
    for (const m of serverSends) deliver(typeof m === "string" ? m : JSON.stringify(m));
    return socket;
  };
  return { connect, reports };
}

function runLoop(opts: Partial<ConstructorParameters<typeof HostAgent>[0]>) {
  const events: AgentEvent[] = [];
  const controller = new AbortController();
  const driver = new MemoryDriver();
  const agent = new HostAgent({
    url: "http://127.0.0.1:1",
    token: "hms.test",
    driver,
    bootId: "boot-a",
    reportIntervalMs: 60_000,
    random: () => 0,
    ...opts,
    onEvent: (e) => events.push(e),
  });
  const exit: Promise<AgentExit> = agent.run(controller.signal);
  return { events, driver, exit, stop: () => controller.abort() };
}

const until = async (what: string, pred: () => boolean, ms = 5_000) => {
  const deadline = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
};

const closers: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0)) await c();
});

describe("a channel that sends what the protocol does not allow", () => {
  it("drops malformed messages, says so, and reconciles the next valid desired config", async () => {
    const ch = fakeChannel([
      { type: "desired", v: CHANNEL_VERSION },
      { type: "desired", v: CHANNEL_VERSION, config: { generation: "7", agents: "x", lifecycle: "run" } },
      { type: "lifecycle", v: CHANNEL_VERSION, order: "terminate" },
      { type: "desired", v: CHANNEL_VERSION, config: { ...goodConfig(4), agents: [{ name: "__proto__" }] } },
      "{not json",
      { type: "refresh" },
      { type: "desired", v: CHANNEL_VERSION, config: goodConfig(5) },
    ]);
    const loop = runLoop({ connect: ch.connect });
    closers.push(loop.stop);
    await until("the valid config's report", () => ch.reports.some((r) => r.generation === 5));
    // Nothing of the malformed ones was acted on: only the valid config's agent is installed.
    expect([...loop.driver.installed.keys()]).toEqual(["node-exporter"]);
    expect(ch.reports.map((r) => r.generation)).toEqual([5]);
    const refused = loop.events.filter(
      (e) => e.type === "error" && /not a valid message|not valid/.test(String((e.error as Error).message)),
    );
    expect(refused.length).toBeGreaterThanOrEqual(4);
    loop.stop();
    expect(await loop.exit).toEqual({ reason: "aborted" });
  });
});

describe("a channel that sends messages of a type this agent does not know", () => {
  it("leaves them alone (a newer server's), however many, and acts on the next it knows", async () => {
    const unknown = Array.from({ length: 3 * MAX_INVALID_IN_A_ROW }, (_, i) => ({
      type: "rollout-hint",
      v: CHANNEL_VERSION,
      n: i,
    }));
    const ch = fakeChannel([...unknown, { type: "desired", v: CHANNEL_VERSION, config: goodConfig(6) }]);
    const loop = runLoop({ connect: ch.connect });
    closers.push(loop.stop);
    await until("the valid config's report", () => ch.reports.some((r) => r.generation === 6));
    expect(loop.events.filter((e) => e.type === "error")).toEqual([]);
    expect(loop.events.some((e) => e.type === "channel" && e.state === "closed")).toBe(false);
  });
});

describe("a desired config for another server", () => {
  it("over the channel, is refused as a message the protocol does not allow, never run", async () => {
    const ch = fakeChannel([
      { type: "desired", v: CHANNEL_VERSION, config: { ...goodConfig(7), server_id: "srv-2" } },
      {
        type: "lifecycle",
        v: CHANNEL_VERSION,
        config: { ...goodConfig(8), server_id: "srv-2", lifecycle: "uninstall" },
      },
      { type: "desired", v: CHANNEL_VERSION, config: goodConfig(5) },
    ]);
    const loop = runLoop({ connect: ch.connect, serverId: "srv-1" });
    closers.push(loop.stop);
    await until("the valid config's report", () => ch.reports.some((r) => r.generation === 5));
    expect(ch.reports.map((r) => r.generation)).toEqual([5]);
    const refused = loop.events.filter((e) => e.type === "error").map((e) => String((e as { error: Error }).error));
    expect(refused).toEqual([
      expect.stringMatching(/server "srv-2"'s, not this host's \(srv-1\); it was not acted on/),
      expect.stringMatching(/server "srv-2"'s, not this host's \(srv-1\); it was not acted on/),
    ]);
    loop.stop();
    expect(await loop.exit).toEqual({ reason: "aborted" });
  });

  it("over HTTP (a cache that answers every host the same), is refused and polled again with backoff", async () => {
    const cp = await httpControlPlane((n) =>
      n < 2
        ? { status: 200, body: JSON.stringify({ ...goodConfig(9), server_id: "srv-2" }) }
        : { status: 200, body: JSON.stringify(goodConfig(4)) },
    );
    const loop = runLoop({
      url: cp.url,
      transport: "http",
      serverId: "srv-1",
      minPollIntervalMs: 1,
      backoff: { baseMs: 10, capMs: 20 },
    });
    closers.push(loop.stop);
    await until("the valid config's report", () => cp.reports.some((r) => r.generation === 4));
    expect(cp.reports.map((r) => r.generation)).toEqual([4]);
    const errors = loop.events.filter((e) => e.type === "error") as { error: Error; attempt: number }[];
    expect(errors.map((e) => e.attempt)).toEqual([1, 2]);
    expect(String(errors[0].error)).toMatch(/not this host's/);
    // Only the refusal is logged: no "desired" line carries the other server's generation.
    const desired = loop.events.filter((e) => e.type === "desired") as { generation: number | null }[];
    expect(desired[0]?.generation).toBe(4);
    expect(desired.map((e) => e.generation)).not.toContain(9);
  });
});

describe("a channel that sends nothing but garbage", () => {
  it("is given up after a few malformed messages in a row, not read (and logged) for ever", async () => {
    const garbage = Array.from({ length: 5_000 }, (_, i) => `{garbage ${i}`);
    const ch = fakeChannel(garbage);
    let connects = 0;
    const loop = runLoop({
      connect: (url, init) => (connects++, ch.connect(url, init)),
      reconnect: { baseMs: 60_000, capMs: 60_000 },
      random: () => 1,
    });
    closers.push(loop.stop);
    const closed = () => loop.events.find((e) => e.type === "channel" && e.state === "closed");
    await until("the channel given up", () => closed() !== undefined);
    expect(closed()).toMatchObject({ code: 4000, reason: "10 messages in a row the protocol does not allow" });
    // Ten refusals said, not five thousand; nothing acted on; one connection so far.
    await new Promise((r) => setTimeout(r, 200));
    expect(loop.events.filter((e) => e.type === "error")).toHaveLength(MAX_INVALID_IN_A_ROW);
    expect(ch.reports).toEqual([]);
    expect(connects).toBe(1);
    loop.stop();
    expect(await loop.exit).toEqual({ reason: "aborted" });
  });

  it("counts only malformed messages in a row: a valid one in between keeps the channel", async () => {
    const bad = Array.from({ length: MAX_INVALID_IN_A_ROW - 1 }, () => "{bad");
    const ch = fakeChannel([...bad, { type: "desired", v: CHANNEL_VERSION, config: goodConfig(2) }, ...bad]);
    const loop = runLoop({ connect: ch.connect });
    closers.push(loop.stop);
    await until("the valid config's report", () => ch.reports.some((r) => r.generation === 2));
    await until("every refusal said", () => loop.events.filter((e) => e.type === "error").length === 2 * bad.length);
    expect(loop.events.some((e) => e.type === "channel" && e.state === "closed")).toBe(false);
  });
});

/** A control plane over HTTP (transport http) whose desired answers the test scripts. */
async function httpControlPlane(desired: (n: number) => { status: number; body: string | Buffer }) {
  let polls = 0;
  const reports: { generation: number }[] = [];
  const server: HttpServer = createHttpServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      if (req.url!.startsWith("/v1/agent/desired")) {
        const n = polls++;
        // The valid answer keeps its ETag: a host holding it is answered 304.
        if (req.headers["if-none-match"] === '"good"') return res.writeHead(304, { etag: '"good"' }).end();
        const a = desired(n);
        const good = a.body.toString().startsWith('{"server_id"');
        res.writeHead(a.status, { "content-type": "application/json", etag: good ? '"good"' : `"bad-${n}"` });
        res.end(a.body);
      } else if (req.url === "/v1/agent/inventory") {
        const report = JSON.parse(Buffer.concat(chunks).toString());
        reports.push(report);
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify(accepted(report.generation)));
      } else {
        res.writeHead(404).end();
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  closers.push(() => new Promise<void>((r) => server.close(() => r())));
  server.closeAllConnections?.();
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, reports, polls: () => polls };
}

describe("a desired config over HTTP that is not one", () => {
  it("is refused (kept out of the loop) and polled again with backoff until a valid one comes", async () => {
    const bad = [
      JSON.stringify({ generation: 3, agents: "x", lifecycle: "run", server_id: "srv-1" }),
      JSON.stringify({ ...goodConfig(3), agents: null }),
      JSON.stringify({ ...goodConfig(3), lifecycle: "explode" }),
      "<html>proxy error</html>",
    ];
    const cp = await httpControlPlane((n) =>
      n < bad.length ? { status: 200, body: bad[n] } : { status: 200, body: JSON.stringify(goodConfig(4)) },
    );
    const loop = runLoop({ url: cp.url, transport: "http", minPollIntervalMs: 1, backoff: { baseMs: 10, capMs: 20 } });
    closers.push(loop.stop);
    await until("the valid config's report", () => cp.reports.some((r) => r.generation === 4));
    expect(cp.reports.map((r) => r.generation)).toEqual([4]);
    expect([...loop.driver.installed.keys()]).toEqual(["node-exporter"]);
    const errors = loop.events.filter((e) => e.type === "error");
    expect(errors).toHaveLength(bad.length);
    // Backed off: each failure counts as one more attempt.
    expect(errors.map((e) => (e as { attempt: number }).attempt)).toEqual([1, 2, 3, 4]);
  });

  it("stops reading an oversized desired config instead of holding it in memory", async () => {
    const huge = Buffer.alloc(64 * 1024 * 1024, 0x20);
    const cp = await httpControlPlane((n) =>
      n === 0 ? { status: 200, body: huge } : { status: 200, body: JSON.stringify(goodConfig(4)) },
    );
    const loop = runLoop({ url: cp.url, transport: "http", minPollIntervalMs: 1, backoff: { baseMs: 10, capMs: 20 } });
    closers.push(loop.stop);
    await until("the valid config's report", () => cp.reports.some((r) => r.generation === 4), 10_000);
    const err = loop.events.find((e) => e.type === "error") as { error: Error } | undefined;
    expect(err?.error.message).toMatch(/larger than/);
  });
});

const agentsNamed = (n: number) =>
  Array.from({ length: n }, (_, i) => ({ name: `a${i}`, image: "img", version: "1", instance_id: `i-${i}` }));

describe("a desired config with more agents than a server may be given today", () => {
  it("is run: a server that raised its limit does not have older agents refuse every config", async () => {
    const many = agentsNamed(MAX_AGENTS + 1);
    const cp = await httpControlPlane(() => ({
      status: 200,
      body: JSON.stringify({ ...goodConfig(3), agents: many }),
    }));
    const loop = runLoop({ url: cp.url, transport: "http", minPollIntervalMs: 1, backoff: { baseMs: 10, capMs: 20 } });
    closers.push(loop.stop);
    await until("the config's report", () => cp.reports.some((r) => r.generation === 3));
    expect(loop.driver.installed.size).toBe(MAX_AGENTS + 1);
    expect(loop.events.filter((e) => e.type === "error")).toEqual([]);
  });
});

describe("a desired config with more agents than this agent's own limit", () => {
  it("is refused whole (no agent of it installed), and polled again", async () => {
    const many = agentsNamed(MAX_DESIRED_AGENTS + 1);
    const cp = await httpControlPlane((n) =>
      n === 0
        ? { status: 200, body: JSON.stringify({ ...goodConfig(3), agents: many }) }
        : { status: 200, body: JSON.stringify(goodConfig(4)) },
    );
    const loop = runLoop({ url: cp.url, transport: "http", minPollIntervalMs: 1, backoff: { baseMs: 10, capMs: 20 } });
    closers.push(loop.stop);
    await until("the valid config's report", () => cp.reports.some((r) => r.generation === 4));
    expect(cp.reports.map((r) => r.generation)).toEqual([4]);
    expect(loop.driver.operations).toBe(1);
    const err = loop.events.find((e) => e.type === "error") as { error: Error } | undefined;
    expect(err?.error.message).toMatch(
      new RegExp(`agents: more than ${MAX_DESIRED_AGENTS} agents, this agent's limit`),
    );
  });
});

describe("an error answer whose body never ends", () => {
  it("is read only up to its cap: the call fails with the status, the rest cancelled unread", async () => {
    let written = 0;
    let gone = false;
    const server: HttpServer = createHttpServer((_req, res) => {
      // A proxy's error page streamed without end.
      res.writeHead(502, { "content-type": "text/html" });
      const chunk = Buffer.alloc(64 * 1024, "x");
      const more = () => {
        while (!gone && written < 64 * 1024 * 1024) {
          written += chunk.length;
          if (!res.write(chunk)) return void res.once("drain", more);
        }
        if (!gone) res.end();
      };
      res.on("close", () => (gone = true));
      more();
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    closers.push(() => new Promise<void>((r) => (server.closeAllConnections(), server.close(() => r()))));
    const api = new HostApi(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, "hms.x.y");
    const err = await api
      .report({
        generation: 1,
        reconciled_at: new Date().toISOString(),
        boot_id: "b",
        agents: [],
        errors: [],
        assignments: { units: [], storage: [] },
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect(err).toMatchObject({ status: 502, code: "http_502" });
    expect((err as Error).message).toMatch(/^x{500}$/);
    await until("the server seeing the stream cancelled", () => gone);
    // Read up to the cap, and what the socket buffers hold: a few megabytes, not the 64 sent.
    expect(written).toBeLessThan(32 * 1024 * 1024);
  });
});

describe("a channel whose upgrade never finishes", () => {
  it.each([
    ["the runtime's WebSocket", webSocketConnector(500)],
    ["ws (harbormaster-agent's)", wsConnector(1024, 500)],
  ])("gives up on the upgrade within its bound instead of hanging the loop: %s", async (_, connect) => {
    const sockets: Socket[] = [];
    const closed: Socket[] = [];
    const server: Server = createServer((s) => {
      sockets.push(s);
      // Read (and drop) the upgrade request, so the client's close is seen.
      s.resume();
      s.on("close", () => closed.push(s));
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    closers.push(() => {
      for (const s of sockets) s.destroy();
      return new Promise<void>((r) => server.close(() => r()));
    });
    const url = `ws://127.0.0.1:${(server.address() as AddressInfo).port}/v1/agent/channel`;
    const t0 = Date.now();
    await expect(connect(url, { protocols: ["harbormaster.v1"], headers: {} })).rejects.toThrow(/within 0\.5 s/);
    expect(Date.now() - t0).toBeLessThan(3_000);
    await until("the half-open socket to be closed", () => sockets.length > 0 && closed.length === sockets.length);
  });
});

/** The 101 answer to a WebSocket upgrade request, as a raw server writes it. */
function upgradeAnswer(request: Buffer) {
  const key = /sec-websocket-key: *(\S+)/i.exec(request.toString())![1];
  const accept = createHash("sha1").update(`${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest("base64");
  return (
    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
    `Sec-WebSocket-Accept: ${accept}\r\nSec-WebSocket-Protocol: harbormaster.v1\r\n\r\n`
  );
}

/** A raw TCP server that hands each upgrade request to `onUpgrade`; closed after the test. */
async function rawServer(onUpgrade: (s: Socket, request: Buffer) => void) {
  const sockets: Socket[] = [];
  const server: Server = createServer((s) => {
    sockets.push(s);
    s.on("error", () => {});
    s.once("data", (request: Buffer) => onUpgrade(s, request));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  closers.push(() => {
    for (const s of sockets) s.destroy();
    return new Promise<void>((r) => server.close(() => r()));
  });
  return `ws://127.0.0.1:${(server.address() as AddressInfo).port}/v1/agent/channel`;
}

describe("a channel message sent with the upgrade's answer", () => {
  it("is not lost before the channel listens (ws emits it at once)", async () => {
    const refresh = JSON.stringify({ type: "refresh", v: CHANNEL_VERSION });
    const url = await rawServer((s, request) => {
      // One write: the answer and the first frame come in the same read.
      const frame = Buffer.concat([Buffer.from([0x81, refresh.length]), Buffer.from(refresh)]);
      s.write(Buffer.concat([Buffer.from(upgradeAnswer(request)), frame]));
    });
    const conn = new ChannelConnection(
      await wsConnector()(url, { protocols: ["harbormaster.v1"], headers: {} }),
      60_000,
    );
    expect(await conn.next(2_000)).toEqual({ kind: "message", message: { type: "refresh", v: CHANNEL_VERSION } });
    conn.close();
  });
});

describe("a channel message larger than the agent takes", () => {
  it("is refused from its frame header, before its payload is read, and the channel closes with 1009", async () => {
    const declared = 9 * 1024 * 1024;
    let written = 0;
    let clientGone = false;
    // A server that upgrades, then sends one text frame declaring 9 MiB, its payload trickling in.
    const url = await rawServer((s, request) => {
      s.on("close", () => (clientGone = true));
      s.write(upgradeAnswer(request));
      const header = Buffer.alloc(10);
      header[0] = 0x81; // FIN, text
      header[1] = 127; // a 64-bit length follows
      header.writeBigUInt64BE(BigInt(declared), 2);
      s.write(header);
      const chunk = Buffer.alloc(64 * 1024, 0x20);
      const drip = setInterval(() => {
        if (clientGone || s.destroyed || written >= declared) return clearInterval(drip);
        s.write(chunk);
        written += chunk.length;
      }, 20);
      s.on("close", () => clearInterval(drip));
    });
    const conn = new ChannelConnection(
      await wsConnector()(url, { protocols: ["harbormaster.v1"], headers: {} }),
      60_000,
    );
    const e = await conn.next(5_000);
    expect(e).toEqual({ kind: "closed", code: MESSAGE_TOO_BIG, reason: expect.stringMatching(/over 8388608 bytes/) });
    await until("the server to see the socket closed", () => clientGone);
    // The whole message would have taken over 2 s to send: it was refused at its first bytes.
    expect(written).toBeLessThan(1024 * 1024);
  });
});
