// What a deployment writes to Workers Logs, as wrangler.toml configures it, for the bill
// (./bill.ts). Workers Logs bills log events (./prices.ts): each invocation's execution log (a
// Worker fetch or cron run, and each Durable Object call, alarm and WebSocket event: the Workers
// Logs page lists them as invocation handlers) unless `[observability.logs] invocation_logs =
// false`, plus each console line; head_sampling_rate keeps that share of the invocations, with
// all their lines.
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import type { Logging } from "./month.ts";

export type { Logging } from "./month.ts";

/** The keys of one TOML table (`[name]`), as strings (enough for wrangler.toml's flat tables). */
function table(toml: string, name: string): Record<string, string> {
  const escaped = name.replace(/\./g, "\\.");
  const body = new RegExp(`^\\[${escaped}\\]\\s*$([\\s\\S]*?)(?=^\\[|(?![\\s\\S]))`, "m").exec(toml)?.[1] ?? "";
  return Object.fromEntries(
    [...body.matchAll(/^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*("?)([^"\n#]*)\2/gm)].map((m) => [m[1], m[3].trim()]),
  );
}

export function deployedLogging(config = resolve(import.meta.dirname, "../../wrangler.toml")): Logging {
  const toml = readFileSync(config, "utf8");
  const top = table(toml, "observability");
  const logs = table(toml, "observability.logs");
  const access = table(toml, "vars").ACCESS_LOG ?? "";
  return {
    enabled: (logs.enabled ?? top.enabled) === "true",
    headSamplingRate: Number(logs.head_sampling_rate ?? top.head_sampling_rate ?? 1),
    invocationLogs: (logs.invocation_logs ?? "true") !== "false",
    accessLog: access === "on" ? "on" : access === "writes" ? "writes" : "off",
  };
}

export const describeLogging = (l: Logging) =>
  l.enabled
    ? `Workers Logs on, head_sampling_rate ${l.headSamplingRate}, invocation logs ${l.invocationLogs ? "on" : "off"}, ACCESS_LOG "${l.accessLog}"`
    : "Workers Logs off";
