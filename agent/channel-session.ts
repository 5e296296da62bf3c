/**
 * One session of the host channel (./channel.ts): connect with the generation the host holds (the
 * server sends `desired` unless it is current), then reconcile and report whenever the server
 * pushes a change or a refresh, or the heartbeat is due, each report acknowledged by the server
 * with what PUT /v1/agent/inventory would answer. Ends when the socket closes (the loop in
 * ./agent.ts reconnects, or falls back to HTTP), or for good on a lifecycle order reported, a
 * refused token or a completed decommission.
 */
import { CLOSE_CODES } from "../src/domain/channel.ts";
import type { ServerMessage } from "../src/model/server/channel-messages.ts";
import { ChannelConnection, channelRequest, type ChannelConnector } from "./channel.ts";
import type { Report, ReportAccepted } from "./host-api.ts";
import { ApiError, wakeOn } from "./http.ts";
import type { AgentEvent, AgentExit, LoopState } from "./loop.ts";
import { foreignConfig } from "./protocol.ts";

export interface SessionEnd {
  /** Whether the socket was open at all (false: the upgrade was refused or failed). */
  opened: boolean;
  exit?: AgentExit;
  code?: number;
  reason?: string;
}

/** How long a report waits for its ack before the connection is taken for dead. */
const ACK_TIMEOUT_MS = 15_000;
/** With nothing to report yet, the session still wakes this often (to notice an abort). */
const IDLE_MS = 60_000;
/**
 * Malformed messages in a row that make the session give the channel up: one is dropped (a
 * proxy's stray frame), a stream of them is a broken server whose every frame would cost a log
 * line and a status write, at the rate it sends; the reconnect then backs off.
 */
export const MAX_INVALID_IN_A_ROW = 10;

/** What a session needs of the agent (./agent.ts). */
export interface SessionAgent {
  readonly opts: { url: string; token: string; tokenIn?: "header" | "protocol"; pingMs?: number; serverId?: string };
  readonly connect: ChannelConnector;
  readonly reportIntervalMs: number;
  now(): number;
  emit(e: AgentEvent): void;
  reportDue(s: LoopState): boolean;
  /** Settles when the pass under way ends (null: none runs). */
  passUnderWay(): AbortSignal | null;
  reconcileAndReport(
    s: LoopState,
    send: (report: Report) => Promise<ReportAccepted>,
    opts?: { signal?: AbortSignal },
  ): Promise<AgentExit | null>;
  failed(s: LoopState, err: unknown, signal?: AbortSignal): Promise<AgentExit | null>;
}

class ChannelClosed extends Error {
  readonly code: number;
  constructor(code: number, reason: string) {
    super(reason);
    this.code = code;
  }
}

export async function runChannelSession(agent: SessionAgent, s: LoopState, signal?: AbortSignal): Promise<SessionEnd> {
  const req = channelRequest(
    agent.opts.url,
    agent.opts.token,
    s.desired?.generation ?? null,
    agent.opts.tokenIn ?? "header",
  );
  let conn: ChannelConnection;
  try {
    conn = new ChannelConnection(await agent.connect(req.url, req), agent.opts.pingMs ?? 30_000);
  } catch (err) {
    return { opened: false, reason: err instanceof Error ? err.message : String(err) };
  }
  agent.emit({ type: "channel", state: "open" });
  const stop = () => conn.close(1000, "stopping");
  signal?.addEventListener("abort", stop, { once: true });
  let invalid = 0;
  try {
    for (;;) {
      if (signal?.aborted) return { opened: true };
      if (agent.reportDue(s)) {
        try {
          const exit = await agent.reconcileAndReport(s, (report) => reportOver(conn, report, signal), { signal });
          if (exit) return { opened: true, exit };
          s.failures = 0;
        } catch (err) {
          if (err instanceof ChannelClosed) return ended(err.code, err.message);
          if (signal?.aborted) return { opened: true };
          const exit = await agent.failed(s, err, signal);
          if (exit) return { opened: true, exit };
          // The server issued no such generation: ask it for the current one.
          if (err instanceof ApiError && err.code === "generation_not_issued") conn.hello(null);
        }
        continue;
      }
      const untilReport = s.desired ? s.lastReportAt + agent.reportIntervalMs - agent.now() : IDLE_MS;
      // A pass under way wakes the wait when it ends: its report goes at once.
      const wake = wakeOn(signal, agent.passUnderWay());
      let e = await conn.next(Math.max(0, untilReport), wake.signal).finally(wake.done);
      if (e.kind === "message" && (e.message.type === "desired" || e.message.type === "lifecycle")) {
        const foreign = foreignConfig(agent.opts.serverId, e.message.config);
        if (foreign) e = { kind: "invalid", error: foreign };
      }
      if (e.kind === "closed") return ended(e.code, e.reason);
      if (e.kind === "message") {
        invalid = 0;
        take(agent, s, e.message);
      }
      if (e.kind === "invalid") {
        // Acted on as nothing: the loop keeps the config it had and says what it refused.
        agent.emit({ type: "error", error: e.error, attempt: s.failures, delayMs: 0 });
        if (++invalid >= MAX_INVALID_IN_A_ROW) {
          const reason = `${invalid} messages in a row the protocol does not allow`;
          conn.close(4000, reason);
          return { opened: true, code: 4000, reason };
        }
      }
    }
  } finally {
    signal?.removeEventListener("abort", stop);
    conn.close();
  }
}

/** A close the loop ends on (the token is gone) or reconnects after. */
function ended(code: number, reason: string): SessionEnd {
  if (code === CLOSE_CODES.token_revoked)
    return {
      opened: true,
      exit: { reason: "unauthorized", message: `channel closed: ${reason || "the token was revoked"}` },
    };
  if (code === CLOSE_CODES.decommissioned)
    return {
      opened: true,
      exit: { reason: "unauthorized", message: `channel closed: ${reason || "the server was decommissioned"}` },
    };
  return { opened: true, code, reason };
}

/** A pushed message: a new config (or order) or a refresh makes a report due. */
function take(agent: SessionAgent, s: LoopState, m: ServerMessage) {
  if (m.type === "desired" || m.type === "lifecycle") {
    const { refresh: _refresh, ...config } = m.type === "desired" ? m.config : { ...m.config, refresh: undefined };
    s.desired = config;
    s.etag = `"${config.generation}"`;
    s.due = true;
    agent.emit({ type: "pushed", message: m.type, generation: config.generation });
  } else if (m.type === "refresh") {
    s.due = true;
    agent.emit({ type: "pushed", message: "refresh", generation: s.desired?.generation ?? null });
  } else if (m.type === "error") {
    agent.emit({
      type: "error",
      error: new ApiError(400, m.error.code, m.error.message, null, m.error.details),
      attempt: s.failures,
      delayMs: 0,
    });
  }
}

/** A report over the channel: its ack's body, or the ack's refusal thrown as the HTTP route would. */
async function reportOver(conn: ChannelConnection, report: Report, signal?: AbortSignal): Promise<ReportAccepted> {
  const id = conn.report(report);
  const a = await conn.ack(id, ACK_TIMEOUT_MS, signal);
  if ("type" in a) {
    if (a.status === 200 && a.body) return a.body;
    throw new ApiError(
      a.status,
      a.error?.code ?? `http_${a.status}`,
      a.error?.message ?? `report refused (${a.status})`,
      null,
      a.error?.details,
    );
  }
  if (a.kind === "closed") throw new ChannelClosed(a.code, a.reason);
  conn.close(4000, "no ack");
  throw new ChannelClosed(4000, `no ack within ${ACK_TIMEOUT_MS / 1000} s`);
}
