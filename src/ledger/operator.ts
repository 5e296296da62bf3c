/**
 * The operator's writes to a server's ledger: registration, an explicit desired config, its
 * FleetLock identity and its token. Each commits here first; what it means for the index, the
 * token row, the audit log and the coordinator leaves through the outbox in the same turn.
 */
import { fail, type Failure, type Result } from "../objects/kit/result";
import type { PlanState } from "../planner/ledger-side";
import { applyDesired } from "./desired";
import { audit, identityPayload, memberPayload, project, serverEvent, tokenPayload } from "./effects";
import type { LedgerParts } from "./parts";
import type { HeldNames } from "../fleetlock/store";
import type { ServerRecord, DesiredState } from "../model/server/record";
import type { AgentSpec, DesiredConfig, DesiredConfigInput } from "../model/server/schemas";
import { MAX_SERVER_LABELS } from "../domain/limits";
import { mergeLabels, sameLabels } from "../model/server/labels";
import { noteDesiredChange } from "./rollout-marks";
import { configOf } from "./view";

/**
 * A write that commits names reserved at the fleet's coordinator (a hostname, a fleetlock_id) must
 * commit while they are still held: `deadline` is the reservation's end less a margin for clock
 * skew. The coordinator, once a reservation ends, asks this ledger whether it holds the name
 * (src/fleetlock/names.ts); a commit after that question could be missed, so it is refused.
 */
export const RESERVATION_MARGIN_MS = 30_000;

function pastDeadline(d: LedgerParts, deadline: number | undefined): Failure | null {
  if (deadline === undefined || d.clock() <= deadline) return null;
  return fail(
    "reservation_expired",
    "the names reserved for this write were held too long before it reached the server's ledger; try again",
  );
}

/** What this ledger holds of the fleet's names, for its coordinator (src/fleetlock/names.ts). */
export function heldNames(d: LedgerParts): HeldNames | null {
  const record = d.store.load()?.record;
  if (!record) return null;
  // Removed, or its removal's cleanup under way: it holds no fleetlock_id and no hostname.
  const live = record.state !== "removed" && d.store.lifecycle()?.cleanup_from === undefined;
  return {
    fleet_id: record.fleet_id,
    live,
    identity: {
      fleetlock_id: live ? record.fleetlock_id : null,
      hostname: record.hostname,
      reboot_group: record.reboot_group,
      rev: d.store.rebootRev(),
    },
  };
}

/** Creates the ledger with generation 1; a repeated call for the same server changes nothing. */
export function register(
  d: LedgerParts,
  record: ServerRecord,
  agents: Omit<AgentSpec, "instance_id">[],
  meta: { actor: string; details?: unknown; plan_rev?: number; deadline?: number },
): Result {
  if (d.store.load()) return { ok: true };
  const late = pastDeadline(d, meta.deadline);
  if (late) return late;
  const desired: DesiredState = {
    generation: 1,
    agents: agents.map((a) => ({ ...a, instance_id: crypto.randomUUID() })),
    lifecycle: "run",
    updated_at: record.created_at,
  };
  d.store.transaction(() => {
    d.store.create(record, desired);
    d.store.setPlan({ mode: "planned", rev: meta.plan_rev ?? 0 });
    project(d.outbox);
    d.outbox.enqueue("token", tokenPayload(record, meta.actor, null), { key: "token" });
    if (record.fleetlock_id) d.outbox.enqueue("identity", identityPayload(record, 0), { key: "identity" });
    d.outbox.enqueue("member", memberPayload(record, record.created_at), { key: "member" });
    audit(d.outbox, {
      actor: meta.actor,
      action: "server.register",
      target: `server:${record.id}`,
      details: meta.details,
    });
    serverEvent(d.outbox, record, "registered", record.created_at);
  });
  return { ok: true };
}

export function putDesired(
  d: LedgerParts,
  input: DesiredConfigInput,
  actor: string,
): { ok: true; created: boolean; config: DesiredConfig } | Failure {
  const state = d.store.load();
  if (!state) return fail("not_found", "server does not exist");
  if (state.record.state === "removed") return fail("server_removed", "a removed server cannot be changed");
  const outcome = applyDesired(state.desired, input, d.clock());
  switch (outcome.kind) {
    case "stale_generation":
      return fail(
        "stale_generation",
        `generation ${input.generation} is older than the current generation ${outcome.current.generation}`,
        {
          current_generation: outcome.current.generation,
        },
      );
    case "generation_conflict":
      return fail("generation_conflict", `generation ${input.generation} already holds a different config`, {
        current_generation: outcome.current.generation,
      });
    case "unchanged":
      return { ok: true, created: false, config: configOf(state.record, outcome.current) };
    case "accepted": {
      // Lifecycle orders come only from decommissioning, never from a desired PUT.
      if (outcome.next.lifecycle !== state.desired.lifecycle || state.record.state === "decommissioning") {
        return fail(
          "lifecycle_change_refused",
          `lifecycle is '${state.desired.lifecycle}'; only decommissioning (or cancelling it) changes it`,
          {
            lifecycle: state.desired.lifecycle,
          },
        );
      }
      const config = configOf(state.record, outcome.next);
      d.store.transaction(() => {
        d.store.save({ desired: outcome.next });
        noteDesiredChange(d, state.record.id, state.desired, outcome.next, "operator");
        // An explicit config pins the server: the planner leaves it alone until released.
        d.store.setPlan({
          ...d.store.plan(),
          mode: "pinned",
          pinned_at: d.clock(),
          pinned_by: actor,
        } satisfies PlanState);
        project(d.outbox);
        audit(d.outbox, {
          actor,
          action: "server.desired.put",
          target: `server:${state.record.id}`,
          details: { generation: config.generation, lifecycle: config.lifecycle, agents: config.agents.length },
        });
      });
      return { ok: true, created: true, config };
    }
  }
}

/**
 * Changes the server's FleetLock identity (PATCH /v1/servers/{id}). Each change gets the next
 * revision, so the coordinator ignores a delivery that arrives after a newer one.
 */
export function setRebootIdentity(
  d: LedgerParts,
  change: { fleetlock_id?: string | null; reboot_group?: string },
  meta: { actor: string; details?: unknown; deadline?: number },
): Result<{ rev: number }> {
  const record = d.store.load()?.record;
  if (!record) return fail("not_found", "server does not exist");
  if (record.state === "removed") return fail("server_removed", "a removed server cannot be changed");
  const late = pastDeadline(d, meta.deadline);
  if (late) return late;
  const next: ServerRecord = {
    ...record,
    fleetlock_id: change.fleetlock_id === undefined ? record.fleetlock_id : change.fleetlock_id,
    reboot_group: change.reboot_group ?? record.reboot_group,
  };
  const rev = d.store.rebootRev() + 1;
  d.store.transaction(() => {
    d.store.save({ record: next });
    d.store.setRebootRev(rev);
    d.outbox.enqueue("identity", identityPayload(next, rev), { key: "identity" });
    project(d.outbox);
    audit(d.outbox, {
      actor: meta.actor,
      action: "server.patch",
      target: `server:${record.id}`,
      details: meta.details,
    });
  });
  return { ok: true, rev };
}

/**
 * Merges a PATCH's labels into the server's (a null removes its key). The merged set must stay
 * within MAX_SERVER_LABELS; labels that come out the same write nothing.
 */
export function setLabels(
  d: LedgerParts,
  patch: Record<string, string | null>,
  meta: { actor: string },
): Result<{ changed: boolean }> {
  const record = d.store.load()?.record;
  if (!record) return fail("not_found", "server does not exist");
  if (record.state === "removed") return fail("server_removed", "a removed server cannot be changed");
  const before = record.labels ?? {};
  const labels = mergeLabels(before, patch);
  if (Object.keys(labels).length > MAX_SERVER_LABELS) {
    return fail(
      "validation_failed",
      `the server would have ${Object.keys(labels).length} labels; at most ${MAX_SERVER_LABELS}`,
      [
        {
          path: "labels",
          message: `at most ${MAX_SERVER_LABELS} labels (the server has ${Object.keys(before).length})`,
        },
      ],
    );
  }
  if (sameLabels(before, labels)) return { ok: true, changed: false };
  d.store.transaction(() => {
    d.store.save({ record: { ...record, labels } });
    d.outbox.enqueue("member", memberPayload({ ...record, labels }, d.clock()), { key: "member" });
    project(d.outbox);
    audit(d.outbox, {
      actor: meta.actor,
      action: "server.labels",
      target: `server:${record.id}`,
      details: { before, after: labels },
    });
  });
  return { ok: true, changed: true };
}

/** The host's token stops working at once (a parked poll included); its D1 row follows. */
/**
 * Revokes the server's token, once: the answer is the time the revocation was recorded (a second
 * call answers the first's), or null for a token revoked by older code, which kept no time. Null
 * when there is no server.
 */
export function revokeToken(d: LedgerParts, actor: string): { revoked_at: number | null } | null {
  const record = d.store.load()?.record;
  if (!record) return null;
  if (record.token_hash === "")
    return { revoked_at: record.token_revoked_at ?? d.store.lifecycle()?.cleanup_from ?? null };
  const now = d.clock();
  d.store.transaction(() => {
    d.store.save({ record: { ...record, token_hash: "", token_revoked_at: now } });
    d.outbox.enqueue("token", tokenPayload(record, actor, now), { key: "token" });
    audit(d.outbox, { actor, action: "token.revoke", target: `token:${record.token_id}` });
  });
  return { revoked_at: now };
}

/**
 * A new server token; the old one stops at once (a parked poll included). `replaces` is the token
 * hash the caller read before making its token: when another rotation committed in between, this
 * one is refused rather than silently replacing the other's, whose caller was told its token works
 * and may already be installing it on the host (a host with a dead token stops until someone
 * hands it a new one). The plaintext is never stored, so the loser cannot be given the winner's.
 */
export function rotateToken(d: LedgerParts, tokenHash: string, actor: string, replaces: string): Result {
  const state = d.store.load();
  if (!state) return fail("not_found", "server does not exist");
  if (state.record.state === "removed" || d.store.lifecycle()?.cleanup_from !== undefined) {
    return fail("server_removed", "the server is removed (or being removed); its token cannot be renewed");
  }
  if (state.record.token_hash !== replaces) {
    return fail(
      "token_rotated",
      "another request rotated this server's token while this one ran: the token it answered is the one that " +
        "works, and this request's was never valid; rotate again for a token of your own",
    );
  }
  // A new token works: a revocation before it is no longer the token's state.
  const { token_revoked_at: _revoked, ...record } = state.record;
  const next = { ...record, token_hash: tokenHash };
  d.store.transaction(() => {
    d.store.save({ record: next });
    d.outbox.enqueue("token", tokenPayload(next, actor, null), { key: "token" });
    audit(d.outbox, { actor, action: "server.token.rotate", target: `server:${next.id}` });
  });
  return { ok: true };
}
