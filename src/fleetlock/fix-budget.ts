/**
 * Drift fixes and the fleet's disruption budget (docs/reboot-safety.md#one-disruption-budget). A fix
 * that re-issues a server's config restarts its running agents: it disrupts the server like an
 * applying rollout target, so it holds a unit of the budget from before its write until the server
 * reports every agent realized at the written generation. The coordinator answers for a whole page
 * of fixes in one synchronous turn and takes each allowed server's hold in it, so two fix calls (or
 * a fix and a FleetLock host or a rollout target) never both take the last unit.
 *
 * A fix refused for the budget is not queued: the caller is told who holds the budget and fixes
 * again later; nothing here waits for anyone.
 *
 * A hold is freed only on what is known of the server, never on what a caller guesses. Each call
 * allowed to write is recorded on the hold (`calls`) with an end: its write must reach the server's
 * ledger by `deadline` (the ledger refuses it later). A call that learns its outcome says so
 * (`fixOutcomes`): the generation the ledger answered, or that the ledger refused the write. A call
 * that cannot know (its RPC threw, perhaps after the ledger committed) or that died (kill -9) says
 * nothing, and its hold waits for its end, when the ledger is asked: a desired generation past the
 * one the fix saw means a write happened and the hold stays until the server reports it realized;
 * otherwise nothing was written, and none can be any more: the unit frees.
 *
 * A realized report frees the hold only once no call may still write, and only if it is of the
 * written generation or a later one: a report from before the write (an outbox delivering late)
 * says nothing of the write. A report from older code carries no generation; it frees nothing by
 * itself, and has the ledger asked instead.
 *
 * A write known and never realized does not keep its hold for ever: FIX_REALIZE_BOUND_MS after the
 * write became known, the ledger is asked once more, and a server still not realized is counted
 * as failed instead (a `down` entry marked as the fix's, which its ledger's next healthy report
 * clears like any failed server's). The unit stays taken: a server whose agents did not come back
 * is disrupted, and freeing it on a guess could let another server go down beside it. An operator
 * who knows better releases either (`releaseFixHold`), audited.
 */
import { auditEvent } from "../db/audit";
import { iso } from "../lib/time";
import type { BlockedBy } from "../model/blocked-by";
import type { FleetSettings } from "../model/fleet";
import { fail, type Failure } from "../objects/kit/result";
import { budgetClosure } from "./disruption";
import type { DisruptionHold } from "./disruption-store";
import { audit } from "./effects";
import type { CoordinatorParts } from "./parts";

/** `deadline`: the time (ms) by which the fix's write must reach the ledger, when a hold was taken for it. */
export type FixAllowance =
  { ok: true; deadline?: number } | { ok: false; kind: string; value: string; blocked_by: BlockedBy[] };

/** A server a fix would re-issue, with the desired generation the caller saw. */
export interface FixTarget {
  server_id: string;
  generation: number;
}

/**
 * What a call learned of its write to one server it was allowed to fix: the desired generation
 * its ledger answered for a write it made, or null when the ledger refused or skipped the write or
 * the call never sent it.
 */
export interface FixOutcome {
  server_id: string;
  generation: number | null;
}

/** The hold a fix takes on its server: one per server, so a repeated fix takes nothing twice. */
const fixHolder = (serverId: string) => `fix:${serverId}`;

const FIX_ACTOR = "check.fix";

/** How long a fix's hold waits for its write before its server's ledger is asked. */
const FIX_WRITE_TTL_MS = 2 * 60_000;
/** The write must reach the ledger this long before the hold's end (clock skew), so the answer then is final. */
const FIX_WRITE_MARGIN_MS = 30_000;

/**
 * A hold taken before calls were recorded on it: a call of older code may still be writing, and
 * will never say so. It stays in `calls`, so only the hold's end settles it.
 */
const UNRECORDED_CALL = "(unrecorded)";

/**
 * How long a hold whose write is known waits for the server's realized report before the server
 * is counted failed instead: well past an image pull and an agent's restart, short enough that a
 * fix that broke the server shows as a failed server rather than as a fix in progress.
 */
const FIX_REALIZE_BOUND_MS = 30 * 60_000;

/** The timer of a fix's hold, on the coordinator's alarm (./timers.ts). */
export const FIX_HOLD_TIMER = "fixhold";
const timerOf = (serverId: string) => `${FIX_HOLD_TIMER}:${serverId}`;

/** Whether a call may still write under this hold (its end not reached, its outcome not told). */
const pending = (h: DisruptionHold) => h.until != null;

/**
 * The first generation whose realized report frees a hold no call may still write under: the
 * newest one written, or (on a hold stored before `written` was) any past the one the fix saw.
 */
const releasedAt = (h: DisruptionHold) => h.written ?? (h.generation ?? -1) + 1;

/**
 * Per server id, in the order given: allowed (its hold taken, `call` recorded on it), or refused
 * with the servers that hold the budget. Without a budget every server is allowed and nothing is held.
 */
export function allowFixes(
  c: CoordinatorParts,
  settings: FleetSettings,
  targets: readonly FixTarget[],
  actor: string,
  call: string,
): Record<string, FixAllowance> {
  c.store.syncSettings(settings);
  const out: Record<string, FixAllowance> = {};
  if (!settings.disruption_budget) {
    for (const t of targets) out[t.server_id] = { ok: true };
    return out;
  }
  const now = c.clock();
  const until = c.scheduler.now() + FIX_WRITE_TTL_MS;
  const deadline = until - FIX_WRITE_MARGIN_MS;
  for (const { server_id: id, generation } of targets) {
    const closure = budgetClosure(c, id);
    if (closure) {
      out[id] = { ok: false, kind: closure.kind, value: closure.value, blocked_by: [closure.block] };
      continue;
    }
    const holder = fixHolder(id);
    const held = c.disruption.holds().get(holder);
    if (held) {
      // Another write under the same hold (the generation seen first stays; a known write stays
      // known): the hold waits for this call too, and its end moves to this call's.
      const calls = pending(held) ? (held.calls ?? [UNRECORDED_CALL]) : [];
      // A new write's wait for its realized report starts anew once it is known.
      const { known_at: _knownAt, ...rest } = held;
      c.disruption.replaceHold({
        ...rest,
        until,
        calls: calls.includes(call) ? calls : [...calls, call],
        ...(pending(held) ? {} : { written: releasedAt(held) }),
      });
    } else {
      c.disruption.putHold({
        holder,
        server_id: id,
        rollout_id: FIX_ACTOR,
        since: now,
        until,
        generation,
        calls: [call],
      });
      c.outbox.enqueue(
        "audit",
        auditEvent({
          actor,
          action: "disruption.take",
          target: `fleet:${settings.fleet_id}`,
          details: { id: holder, server_id: id },
        }),
        { deferMs: 1_000 },
      );
    }
    c.scheduler.schedule(timerOf(id), until, { until });
    out[id] = { ok: true, deadline };
  }
  return out;
}

/**
 * A call tells what became of its writes. Its part in each hold ends; a hold no call may still
 * write under is settled on what is known: nothing written frees it, a write already reported
 * realized frees it, and otherwise it waits, with no end, for the written generation's realized
 * report. Returns whether a hold or a timer changed (the alarm is armed again).
 */
export function fixOutcomes(c: CoordinatorParts, call: string, outcomes: readonly FixOutcome[]): boolean {
  let changed = false;
  for (const { server_id: id, generation } of outcomes) {
    const h = c.disruption.holds().get(fixHolder(id));
    if (!h || !pending(h) || !h.calls?.includes(call)) continue;
    changed = true;
    const wrote = generation !== null && h.generation !== undefined && generation > h.generation;
    const next: DisruptionHold = {
      ...h,
      calls: h.calls.filter((x) => x !== call),
      ...(wrote ? { written: Math.max(h.written ?? generation, generation) } : {}),
    };
    if (next.calls!.length > 0) {
      c.disruption.replaceHold(next);
      continue;
    }
    if (next.written === undefined) releaseFix(c, id, "not written");
    else if ((next.realized ?? -1) >= next.written) releaseFix(c, id, "realized");
    else keepKnown(c, id, known(next, next.written, c.scheduler.now()));
  }
  return changed;
}

/**
 * The hold once its write is known and no call may write under it any more: it waits for the
 * realized report, from `known_at` (real time) for at most FIX_REALIZE_BOUND_MS.
 */
const known = (h: DisruptionHold, written: number, now: number): DisruptionHold => {
  const { calls: _calls, realized: _realized, ...rest } = h;
  return { ...rest, until: null, written, known_at: h.known_at ?? now };
};

/** Stores a known hold (when it changed) and keeps its timer at the bound, when the ledger is asked a last time. */
function keepKnown(c: CoordinatorParts, serverId: string, next: DisruptionHold) {
  const was = c.disruption.holds().get(next.holder);
  if (JSON.stringify(next) !== JSON.stringify(was)) c.disruption.replaceHold(next);
  c.scheduler.schedule(timerOf(serverId), next.known_at! + FIX_REALIZE_BOUND_MS, { until: null });
}

/**
 * Holds stored by code older than the bound: a write known (no call may write under it) with no
 * `known_at` and no timer, which only a realized report or an operator would ever free. The bound
 * starts when this code first sees such a hold (when the coordinator's holds are read after a
 * wake): its write is at least that old, and the server still gets the full bound to report. The
 * start is stored with the hold, so a later wake does not move it. The hold's `since` is no start:
 * it is when the first fix took the hold, and a repeat fix under it (whose wait starts anew) keeps
 * it, so a bound from it could count a server failed minutes after its newest write.
 */
export function boundOlderFixHolds(c: CoordinatorParts) {
  let known = false;
  for (const h of c.disruption.holds().values()) {
    if (h.rollout_id !== FIX_ACTOR || pending(h)) continue;
    known = true;
    if (h.known_at === undefined) keepKnown(c, h.server_id, { ...h, until: null, known_at: c.scheduler.now() });
  }
  // Called from whatever read the holds first, which may arm nothing itself, and once per wake:
  // the alarm is set after the timer's row commits, so an object that died between the two (here
  // or in the timer's own settle) left a timer with no alarm, and only a wake that arms again
  // brings it back. Only while a known hold is kept, whose timer is the one at stake; an alarm
  // already set costs no write.
  if (known) void c.scheduler.arm().catch(() => undefined);
}

/**
 * A fix's hold reached its end (the timer), or a report without a generation came: the server's
 * ledger is asked whether the desired generation moved past the one the fix saw. The answer counts
 * only if the hold is still the one asked about; at its end no call may write any more (the ledger
 * refuses a write past its deadline), so the answer is final. Written: kept until the realized
 * report (or freed now if that came already); not written: freed.
 */
export async function settleFixHold(c: CoordinatorParts, serverId: string, until: number | null) {
  const holder = fixHolder(serverId);
  const before = c.disruption.holds().get(holder);
  if (!before || (before.until ?? null) !== until) return;
  const desired = await c.askDesired(serverId);
  const h = c.disruption.holds().get(holder);
  if (!h || (h.until ?? null) !== until) return;
  // A hold stored without the generation its fix saw is taken as written once no call may write under it.
  const seen = h.generation ?? (pending(h) ? Infinity : -Infinity);
  const written = desired !== null && desired.generation > seen;
  if (written && !desired.realized) {
    const now = c.scheduler.now();
    const next = known(h, Math.max(desired.generation, h.written ?? 0), now);
    if (next.known_at! + FIX_REALIZE_BOUND_MS > now) return keepKnown(c, serverId, next);
    // Past the bound: the server is counted failed, as one its ledger reported failed is, until
    // its ledger reports it healthy; the hold's own bookkeeping ends.
    releaseFix(c, serverId, `not realized within ${FIX_REALIZE_BOUND_MS / 60_000} min: counted failed`);
    if (!c.disruption.down().has(serverId))
      c.disruption.setDown(serverId, { status: "failed", since: c.clock(), by_fix: true });
    return;
  }
  releaseFix(c, serverId, desired === null ? "server gone" : written ? "realized" : "not written");
}

/**
 * Its server's ledger reported every agent realized at `generation` (undefined: the event came from
 * older code that did not say). Frees the fix's hold when no call may still write under it and the
 * report is of the written generation or a later one; while a call may, the report is remembered
 * for when it tells its outcome. Without a generation, the ledger is asked (the hold's settle timer,
 * due now). Returns whether a hold or a timer changed.
 */
export function fixRealized(c: CoordinatorParts, serverId: string, generation: number | undefined): boolean {
  const h = c.disruption.holds().get(fixHolder(serverId));
  if (!h) return false;
  if (generation === undefined) {
    if (pending(h)) return false;
    c.scheduler.schedule(timerOf(serverId), c.scheduler.now(), { until: null });
    return true;
  }
  if (pending(h)) {
    if (generation <= (h.realized ?? -1)) return false;
    c.disruption.replaceHold({ ...h, realized: generation });
    return false;
  }
  if (generation < releasedAt(h)) return false;
  return releaseFix(c, serverId, "realized");
}

/** Ends a fix's hold; true when one was held. */
function releaseFix(c: CoordinatorParts, serverId: string, why: string, actor = FIX_ACTOR): boolean {
  const h = c.disruption.dropHold(fixHolder(serverId));
  if (!h) return false;
  c.scheduler.cancel(timerOf(serverId));
  c.outbox.enqueue(
    "audit",
    auditEvent({
      actor,
      action: "disruption.release",
      target: `fleet:${c.store.config?.fleet_id ?? "?"}`,
      details: { id: h.holder, server_id: serverId, why },
    }),
    { deferMs: 1_000 },
  );
  return true;
}

/** A drift fix's claim on the budget as operators see it (GET /v1/fleets/{fleet}/fix-holds). */
export interface FixHoldView {
  server: { id: string; hostname: string | null };
  /**
   * `writing`: a fix call may still write (until `settles_at`, when the ledger is asked);
   * `written`: the write is known, the hold waits for the realized report (until `settles_at`,
   * when the server is counted failed if still not realized); `counted_failed`: that bound passed,
   * and the server counts as failed until its ledger reports it healthy.
   */
  state: "writing" | "written" | "counted_failed";
  since: string;
  settles_at: string | null;
  seen_generation: number | null;
  written_generation: number | null;
}

const hostnameOf = (c: CoordinatorParts, serverId: string) =>
  c.disruption.members().get(serverId)?.hostname ?? c.store.servers.get(serverId)?.hostname ?? null;

/** Every drift fix's claim on the fleet's budget: its holds, and the servers its bound counted failed. */
export function fixHoldViews(c: CoordinatorParts, settings: FleetSettings): FixHoldView[] {
  c.store.syncSettings(settings);
  const out: FixHoldView[] = [];
  for (const h of c.disruption.holds().values()) {
    if (h.rollout_id !== FIX_ACTOR) continue;
    const writing = pending(h);
    const settles = writing ? h.until! : h.known_at !== undefined ? h.known_at + FIX_REALIZE_BOUND_MS : null;
    out.push({
      server: { id: h.server_id, hostname: hostnameOf(c, h.server_id) },
      state: writing ? "writing" : "written",
      since: iso(h.since),
      settles_at: settles === null ? null : iso(settles),
      seen_generation: h.generation ?? null,
      written_generation: h.written ?? null,
    });
  }
  for (const [id, d] of c.disruption.down())
    if (d.by_fix)
      out.push({
        server: { id, hostname: hostnameOf(c, id) },
        state: "counted_failed",
        since: iso(d.since),
        settles_at: null,
        seen_generation: null,
        written_generation: null,
      });
  return out.sort((a, b) => a.since.localeCompare(b.since) || a.server.id.localeCompare(b.server.id));
}

/** The server a ref names among the fix's claims: its id, hostname or `fleet/hostname`. */
function claimNamed(c: CoordinatorParts, fleet: string, ref: string): string | Failure {
  const ids = [
    ...[...c.disruption.holds().values()].filter((h) => h.rollout_id === FIX_ACTOR).map((h) => h.server_id),
    ...[...c.disruption.down()].filter(([, d]) => d.by_fix).map(([id]) => id),
  ];
  if (ids.includes(ref)) return ref;
  const slash = ref.indexOf("/");
  if (slash >= 0 && ref.slice(0, slash) !== fleet)
    return fail("not_held", `'${ref}' names a server of fleet '${ref.slice(0, slash)}', not of '${fleet}'`);
  const name = ref.slice(slash + 1).toLowerCase();
  const found = ids.find((id) => hostnameOf(c, id)?.toLowerCase() === name);
  return (
    found ??
    fail("not_held", `'${ref}' holds no drift fix's unit of fleet '${fleet}' (tried as a server id and a hostname)`)
  );
}

/**
 * An operator frees what a drift fix holds of the budget for a server: a hold whose write is
 * known (the server never reported it realized), or the failed count its bound left. A hold a fix
 * call may still write under is refused: that write could land after the unit went to another
 * server, and the hold settles by itself at its end. Audited before the answer.
 */
export async function releaseFixHold(
  c: CoordinatorParts,
  settings: FleetSettings,
  ref: string,
  actor: string,
): Promise<{ ok: true; released: FixHoldView } | Failure> {
  const before = fixHoldViews(c, settings);
  const serverId = claimNamed(c, settings.fleet_id, ref);
  if (typeof serverId !== "string") return serverId;
  const view = before.find((v) => v.server.id === serverId)!;
  const h = c.disruption.holds().get(fixHolder(serverId));
  if (h && pending(h))
    return fail(
      "invalid_state",
      `a drift fix may still write to '${ref}' until ${iso(h.until!)}; its hold settles by itself then`,
    );
  if (h) {
    c.disruption.dropHold(h.holder);
    c.scheduler.cancel(timerOf(serverId));
  } else c.disruption.setDown(serverId, null);
  await audit(
    c,
    [
      {
        actor,
        action: "disruption.release",
        target: `fleet:${settings.fleet_id}`,
        details: { id: fixHolder(serverId), server_id: serverId, why: "operator", state: view.state },
      },
    ],
    { wait: true },
  );
  return { ok: true, released: view };
}
