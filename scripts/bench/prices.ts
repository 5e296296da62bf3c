// List prices of what a Harbormaster deployment is billed for (Workers Paid plan, Standard usage
// model), in one place: `npm run bench -- cost` turns the local meter's counts into a bill with
// these. Read on 2026-11-24 from Cloudflare's documentation (pages as published in
// cloudflare/cloudflare-docs):
//   Workers:          https://developers.cloudflare.com/workers/platform/pricing/
//   Durable Objects:  https://developers.cloudflare.com/durable-objects/platform/pricing/
//   DO lifecycle:     https://developers.cloudflare.com/durable-objects/concepts/durable-object-lifecycle/
//   D1:               https://developers.cloudflare.com/d1/platform/pricing/
//   Workers Logs:     https://developers.cloudflare.com/workers/observability/logs/workers-logs/#pricing
//                     (from December 1, 2026 Workers Logs moves to Cloudflare Observability pricing,
//                     the page says; the prices below are the ones it lists until then)
//   R2:               https://developers.cloudflare.com/r2/pricing/ (Standard storage; egress is free)
// Check them again before quoting a bill: prices and inclusions change.

export const PRICES_READ_ON = "2026-11-24";

/** One metered item: what the plan includes per month, and the price of each unit beyond it. */
export interface Price {
  unit: string;
  includedPerMonth: number;
  usdPerUnit: number;
  source: string;
}

const WORKERS = "https://developers.cloudflare.com/workers/platform/pricing/";
const DO = "https://developers.cloudflare.com/durable-objects/platform/pricing/";
const D1 = "https://developers.cloudflare.com/d1/platform/pricing/";
const LOGS = "https://developers.cloudflare.com/workers/observability/logs/workers-logs/#pricing";
const R2 = "https://developers.cloudflare.com/r2/pricing/";

export const PRICES = {
  /** The Workers Paid plan's monthly minimum, which the inclusions below come with. */
  planUsdPerMonth: 5,
  /** Inbound requests, cron runs included (pricing example 3); subrequests are free. */
  workerRequests: { unit: "request", includedPerMonth: 10_000_000, usdPerUnit: 0.3 / 1e6, source: WORKERS },
  workerCpuMs: { unit: "CPU ms", includedPerMonth: 30_000_000, usdPerUnit: 0.02 / 1e6, source: WORKERS },
  /** HTTP requests, RPC calls (each call on a stub is a session), alarms; incoming WebSocket messages at 20:1. */
  doRequests: { unit: "request", includedPerMonth: 1_000_000, usdPerUnit: 0.15 / 1e6, source: DO },
  /** Wall-clock time awake × 128 MB per object, whatever it really uses. */
  doGbSeconds: { unit: "GB-s", includedPerMonth: 400_000, usdPerUnit: 12.5 / 1e6, source: DO },
  /** SQLite-backed objects' own storage, billed since January 2026 like D1's rows (its own inclusions). */
  doRowsRead: { unit: "row read", includedPerMonth: 25_000_000_000, usdPerUnit: 0.001 / 1e6, source: DO },
  doRowsWritten: { unit: "row written", includedPerMonth: 50_000_000, usdPerUnit: 1 / 1e6, source: DO },
  d1RowsRead: { unit: "row read", includedPerMonth: 25_000_000_000, usdPerUnit: 0.001 / 1e6, source: D1 },
  d1RowsWritten: { unit: "row written", includedPerMonth: 50_000_000, usdPerUnit: 1 / 1e6, source: D1 },
  /** "SQL Stored data": 5 GB-month included, then $0.20 per GB-month (SQLite-backed objects). */
  doStoredGbMonth: { unit: "GB-month", includedPerMonth: 5, usdPerUnit: 0.2, source: DO },
  /** D1 storage: the first 5 GB included, then $0.75 per GB-month. */
  d1StoredGbMonth: { unit: "GB-month", includedPerMonth: 5, usdPerUnit: 0.75, source: D1 },
  /** Workers Logs events written: execution logs and console lines (./logging.ts), 20 million included. */
  logEvents: { unit: "log event", includedPerMonth: 20_000_000, usdPerUnit: 0.6 / 1e6, source: LOGS },
  /** R2 (the image catalog's bytes): stored GB-month, Class A (writes, multipart steps), Class B (reads); no egress fee, deletes free. */
  r2StorageGbMonth: { unit: "GB-month", includedPerMonth: 10, usdPerUnit: 0.015, source: R2 },
  r2ClassA: { unit: "Class A operation", includedPerMonth: 1_000_000, usdPerUnit: 4.5 / 1e6, source: R2 },
  r2ClassB: { unit: "Class B operation", includedPerMonth: 10_000_000, usdPerUnit: 0.36 / 1e6, source: R2 },
} as const satisfies Record<string, Price | number>;

/** Bytes in a GB of stored data (decimal, as the pricing pages' GB-month reads). */
export const STORED_GB = 1e9;
/** Memory every object is billed for, GB (the Durable Objects pricing page: 128 MB). */
export const DO_GB = 0.128;
/** Seconds in the month the bill is for (30 days, as the pricing pages' examples use). */
export const MONTH_S = 30 * 24 * 3600;
