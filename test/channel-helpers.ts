import { SELF } from "cloudflare:test";
import { expect } from "vitest";
import { BASE, report, settle } from "./helpers";

type Message = { type: string; [k: string]: any };

/** One host's end of the channel, opened through the worker, with its messages queued as they come. */
export interface Channel {
  ws: WebSocket;
  response: Response;
  /** The next message (of `type`, if given; others before it are dropped), within `ms`. */
  next(type?: string, ms?: number): Promise<Message>;
  /** Messages received and not yet taken. */
  pending(): Message[];
  send(message: unknown): void;
  closed: Promise<{ code: number; reason: string }>;
  close(): void;
}

export async function upgrade(
  token: string | null,
  opts: { generation?: number; headers?: Record<string, string> } = {},
) {
  const headers: Record<string, string> = { Upgrade: "websocket", ...opts.headers };
  if (token) headers.Authorization = `Bearer ${token}`;
  const query = opts.generation === undefined ? "" : `?generation=${opts.generation}`;
  return SELF.fetch(`${BASE}/v1/agent/channel${query}`, { headers });
}

export async function openChannel(
  token: string | null,
  opts: { generation?: number; headers?: Record<string, string> } = {},
): Promise<Channel> {
  const response = await upgrade(token, opts);
  if (response.status !== 101) throw new Error(`upgrade refused: ${response.status} ${await response.text()}`);
  return channelOf(response);
}

function channelOf(response: Response): Channel {
  const ws = response.webSocket!;
  ws.accept();
  const inbox: Message[] = [];
  const waiters: (() => void)[] = [];
  let onClose: (c: { code: number; reason: string }) => void = () => {};
  const closed = new Promise<{ code: number; reason: string }>((r) => (onClose = r));
  ws.addEventListener("message", (e) => {
    inbox.push(typeof e.data === "string" && e.data !== "pong" ? JSON.parse(e.data) : { type: "raw", data: e.data });
    for (const w of waiters.splice(0)) w();
  });
  ws.addEventListener("close", (e) => {
    onClose({ code: e.code, reason: e.reason });
    for (const w of waiters.splice(0)) w();
  });
  const next = async (type?: string, ms = 5_000) => {
    const deadline = Date.now() + ms;
    for (;;) {
      const i = inbox.findIndex((m) => type === undefined || m.type === type);
      if (i >= 0) return inbox.splice(0, i + 1).at(-1)!;
      const left = deadline - Date.now();
      if (left <= 0)
        throw new Error(`no ${type ?? "message"} within ${ms} ms; got ${JSON.stringify(inbox.map((m) => m.type))}`);
      await new Promise<void>((r) => {
        const t = setTimeout(r, left);
        waiters.push(() => (clearTimeout(t), r()));
      });
    }
  };
  return {
    ws,
    response,
    next,
    pending: () => [...inbox],
    send: (message) => ws.send(typeof message === "string" ? message : JSON.stringify(message)),
    closed,
    close: () => ws.close(1000, "done"),
  };
}

/** Resolves with the close, or rejects after `ms`. */
export function closedWithin(ch: Channel, ms = 5_000) {
  return Promise.race([
    ch.closed,
    new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`not closed within ${ms} ms`)), ms)),
  ]);
}

/** Sends an empty generation-1 report on the channel, expects its ack (200), and lets the ledger's outbox settle. */
export function emptyReporter(ch: Channel, serverId: string) {
  return async (id: string) => {
    ch.send({ type: "report", v: 1, id, report: report(1, []) });
    expect((await ch.next("ack")).status).toBe(200);
    await settle(serverId);
  };
}
