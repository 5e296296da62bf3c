/** What the agent's loop reports, how it ends, and what it knows (shared by ./agent.ts and ./channel-session.ts). */
import type { DesiredConfig, InventoryReport } from "../src/model/server/schemas.ts";
import type { ReconcileOutcome } from "./driver.ts";
import type { ReportAccepted } from "./host-api.ts";

export type AgentEvent =
  | { type: "desired"; changed: boolean; generation: number | null; ms: number }
  /** A message the server pushed over the channel. */
  | { type: "pushed"; message: "desired" | "lifecycle" | "refresh"; generation: number | null }
  | { type: "channel"; state: "open" }
  /** The channel closed (`code`), or could not be opened (`code` null); the next attempt in `retryInMs`. */
  | { type: "channel"; state: "closed"; code: number | null; reason: string; retryInMs: number }
  | { type: "reconciled"; generation: number; outcome: ReconcileOutcome }
  /** The heartbeat came due while a pass toward `generation` was still under way (it was sent anyway). */
  | { type: "reconciling"; generation: number }
  | { type: "reported"; generation: number; accepted: ReportAccepted; ms: number }
  /** A reconcile found the last accepted report still true: over HTTP, the next poll carries its tag instead. */
  | { type: "unchanged"; generation: number; reportTag: string }
  | { type: "error"; error: unknown; attempt: number; delayMs: number };

export type AgentExit =
  | { reason: "aborted" }
  | { reason: "terminated"; generation: number }
  | { reason: "uninstalled"; generation: number }
  /** The server's token no longer works (revoked, or the server was removed). */
  | { reason: "unauthorized"; message: string };

/** What the loop knows, kept across transports (a channel that drops resumes from it). */
export interface LoopState {
  desired: DesiredConfig | null;
  etag: string | null;
  /** A reconcile and report is owed (start, new config, refresh). */
  due: boolean;
  lastReportAt: number;
  /** The report_tag of the last accepted report, and that report's content (src/domain/report-content.ts). */
  reportTag: string | null;
  reportedContent: string | null;
  /** The last accepted report: a heartbeat while a pass is under way says it again. */
  lastReport: InventoryReport | null;
  lastPollAt: number;
  failures: number;
}
