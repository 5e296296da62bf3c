/**
 * The host's poll for its desired config (GET /v1/agent/desired), answered from the ledger alone:
 * it never touches D1. A long poll waits in the Worker, woken by the ledger (./waits.ts).
 */
import { digestsEqual } from "../lib/crypto";
import { fail, type Failure } from "../objects/kit/result";
import type { ServerRecord } from "../model/server/record";
import { pendingRefresh } from "./refresh";
import type { DesiredConfig } from "../model/server/schemas";
import type { LedgerStore } from "./store";
import { configOf } from "./view";

export type PollAnswer =
  | { ok: true; notModified: true; generation: number }
  | { ok: true; notModified: false; generation: number; config: DesiredConfig; refresh?: { requested_at: number } }
  | Failure;

/** The record of the server whose token hashes to `tokenHash`, while that token is valid. */
export function authorized(store: LedgerStore, tokenHash: string): ServerRecord | null {
  const record = store.load()?.record;
  return record && record.state !== "removed" && record.token_hash !== "" && digestsEqual(record.token_hash, tokenHash)
    ? record
    : null;
}

/** A host that holds the current generation, with no refresh pending, has nothing to be told yet. */
export function nothingNew(store: LedgerStore, known: number | null) {
  return known === store.load()?.desired.generation && !pendingRefresh(store);
}

/**
 * Everything a poll's answer depends on: when it changes, a waiting poll is woken. The token is
 * checked again then, so a token revoked meanwhile gets nothing.
 */
export function pollSignature(store: LedgerStore) {
  const state = store.load();
  if (!state) return "";
  const { token_hash, state: lifecycle } = state.record;
  return JSON.stringify([
    token_hash,
    lifecycle === "removed",
    state.desired.generation,
    pendingRefresh(store)?.requested_at ?? null,
  ]);
}

export function pollAnswer(store: LedgerStore, tokenHash: string, known: number | null): PollAnswer {
  const record = authorized(store, tokenHash);
  if (!record) return fail("unauthorized", "invalid server token");
  const { desired } = store.load()!;
  // A pending refresh answers 200 even to a current If-None-Match: the host is asked to report.
  const refresh = pendingRefresh(store);
  // A 304 carries no body, so the config is not copied across the RPC boundary for it.
  if (known === desired.generation && !refresh) return { ok: true, notModified: true, generation: desired.generation };
  const config = configOf(record, desired);
  if (refresh)
    return {
      ok: true,
      notModified: false,
      generation: desired.generation,
      config,
      refresh: { requested_at: refresh.requested_at },
    };
  return { ok: true, notModified: false, generation: desired.generation, config };
}
