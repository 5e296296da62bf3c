/**
 * Who gets a slot and who gives one back: the host path (pre-reboot, steady-state) and the
 * releases operators and ledgers ask for. Each decision reads and writes the store in one turn;
 * the only await before a grant or a park is stored is none at all, so nothing interleaves.
 */
import type { FleetSettings } from "../model/fleet";
import { entryNamed, TRIED } from "./named";
import { budgetClosure } from "./disruption";
import type { AuditEntry } from "../db/audit";
import { digestsEqual } from "../lib/crypto";
import { fail, type Failure } from "../objects/kit/result";
import type { CoordinatorParts } from "./parts";
import { audit, emit, hostAudit } from "./effects";
import { rebootGranted, rebootReleased } from "./reboot-events";
import { implicitGroup, viewOf } from "./groups";
import { catchUpReserved, clientOf } from "./identity";
import { failure, type ClientParams, type FleetLockFailure } from "./protocol";
import { admit, claim, queuedOf } from "./queue";
import { holdUntilHealthy, noteRebooted, waitsForHealth } from "./health";
import { holderOf, release, releaseWhere, type Holder } from "./semaphore";
import type { AskLedger, FleetConfig } from "./store";
import type { GroupView } from "./views";

/**
 * How a pre-reboot is asked: `resume` looks again for a request already waiting (it parks nothing
 * anew); `ask` reaches a server's ledger (an id reserved and perhaps committed: ./identity.ts).
 */
export interface PreRebootOptions {
  resume?: boolean;
  ask: AskLedger;
}

/** A pre-reboot's answer now, or the waiter (a 101) the Worker holds until the answer is decided. */
type PreRebootAnswer = { ok: true } | FleetLockFailure | { ok: "waiting"; waiter: Response };

function authorized(c: CoordinatorParts, keyHash: string): FleetConfig | null {
  const config = c.store.config;
  return config?.key_hash && digestsEqual(config.key_hash, keyHash) ? config : null;
}

const unauthorized = () => failure("unauthorized", "invalid FleetLock key for this fleet");

/** Whether the key is the fleet's: asked before a request's body is refused, so a wrong key learns nothing of it. */
export const keyMatches = (c: CoordinatorParts, keyHash: string): boolean => authorized(c, keyHash) !== null;

/**
 * RecursiveLock with a fair queue: a slot now, a place in the group's FIFO queue until one frees
 * (the Worker waits on a waiter socket, woken with the answer: ./parked.ts), or a refusal saying why.
 */
export async function preReboot(
  c: CoordinatorParts,
  keyHash: string,
  params: ClientParams,
  opts: PreRebootOptions,
): Promise<PreRebootAnswer> {
  const config = authorized(c, keyHash);
  if (!config) return unauthorized();
  // A registered id is read once; only an unknown one may be reserved and caught up.
  const known = c.store.clients.get(params.id);
  if (!known) await catchUpReserved(c, opts.ask, params.id);
  const client = clientOf(c.store, config, params.id, known);
  if (!client.ok) return client;
  if (client.entry && client.entry.reboot_group !== params.group) {
    return failure(
      "group_mismatch",
      `client '${params.id}' is registered in reboot group '${client.entry.reboot_group}', not '${params.group}'`,
    );
  }
  // From here on, no await until the grant or the place (and its waiter) is stored: one uninterrupted turn.
  const now = c.clock();
  const serverId = client.entry?.server_id ?? null;
  // An id holds at most one slot in the fleet; holding one anywhere makes this a recursive lock
  // (and claims a slot granted while the host could not be answered).
  const heldIn = c.store.heldIn(params.id);
  if (heldIn) {
    c.store.saveGroup(heldIn, claim(c.store.group(heldIn)!, params.id, now));
    return { ok: true };
  }
  const name = params.group;
  // A request looking again after its deadline finds its place gone, with the refusal it waited for.
  const lapsed = opts.resume ? c.parked.expire(name, params.id, now) : null;
  if (lapsed) return lapsed;
  const group = c.store.group(name) ?? implicitGroup(config, now);
  if (!group) return failure("unknown_group", `reboot group '${name}' is not configured for this fleet`);
  const adm = admit(group, c.store.queue(name), params.id, serverId, now, {
    mayPark: !opts.resume,
    gate: c.gates.closed(group, now),
    budget: budgetClosure(c, serverId),
  });
  if (adm.kind === "refused") {
    if (c.store.group(name)) c.gates.note(name, c.store.group(name)!, now);
    return failure(adm.refusal, adm.value);
  }
  if (adm.kind === "granted") {
    if (adm.changed) {
      c.store.saveGroup(name, adm.group);
      rebootGranted(c, name, { id: params.id, server_id: serverId }, now);
      await audit(c, [hostAudit(config.fleet_id, "fleetlock.grant", params.id, serverId, { group: name })], {
        wait: false,
      });
    }
    return { ok: true };
  }
  if (!c.store.group(name)) c.store.saveGroup(name, group);
  c.store.saveQueue(name, adm.queue);
  // A slot may be free and open with nobody answered yet (a window just opened): settle it now,
  // counting this host as present. Its decisions are made before drain's first await.
  const drained = c.parked.drain(name, { id: params.id, at: now });
  let answer: PreRebootAnswer;
  if (holderOf(c.store.group(name)!, params.id)) answer = { ok: true };
  else if (!queuedOf(c.store.queue(name), params.id)) answer = c.parked.refusal(name, params.id, "removed");
  // Still in this turn: every later decision finds the waiter.
  else {
    answer = { ok: "waiting", waiter: c.parked.hold(name, adm.entry, now) };
    if (adm.changed) queuedEvent(c, config, name, params.id, serverId, now);
  }
  await drained;
  return answer;
}

/** A host parked: the fleet's webhooks learn it, and why it waits. */
function queuedEvent(
  c: CoordinatorParts,
  config: FleetConfig,
  name: string,
  id: string,
  serverId: string | null,
  now: number,
) {
  const view = viewOf(c, config, name, c.store.group(name)!, now);
  const mine = view.queue.find((e) => e.id === id);
  if (!mine) return;
  const host = mine.server?.hostname ?? id;
  emit(
    c,
    config.fleet_id,
    "reboot.queued",
    serverId ? `server:${serverId}` : `group:${name}`,
    `${host} waits for a reboot slot in ${name}: ${mine.blocked_by.map((b) => b.message).join("; ") || "queued"}`,
    { group: name, id, server_id: serverId, hostname: host, position: mine.position, blocked_by: mine.blocked_by },
    now,
  );
}

/**
 * UnlockIfHeld, for whichever group holds the id: a host whose group changed while it held a
 * slot must still be able to reach steady state. Succeeds whether or not anything was held.
 */
export async function steadyState(
  c: CoordinatorParts,
  keyHash: string,
  params: ClientParams,
  ask: AskLedger,
): Promise<{ ok: true; released: boolean } | FleetLockFailure> {
  const config = authorized(c, keyHash);
  if (!config) return unauthorized();
  const groupName = c.store.heldIn(params.id);
  if (!groupName) {
    const known = c.store.clients.get(params.id);
    if (!known) await catchUpReserved(c, ask, params.id);
    const client = clientOf(c.store, config, params.id, known);
    if (!client.ok) return client;
    c.parked.giveUp(params.id);
    return { ok: true, released: false };
  }
  const now = c.clock();
  const g = c.store.group(groupName)!;
  const holder = holderOf(g, params.id)!;
  if (waitsForHealth(g, holder)) {
    // healthy_report: answered as Zincati expects, the slot kept until the server reports healthy.
    holdUntilHealthy(c, groupName, holder, now, null);
    await c.parked.rearm();
    return { ok: true, released: false };
  }
  // Counted as rebooted and not yet healthy before its slot goes to anyone (the gate may close).
  if (holder.server_id && !holder.id.startsWith("rollout:"))
    noteRebooted(c, { server_id: holder.server_id, id: holder.id }, groupName, now, null);
  const released = await releaseAndDrain(c, groupName, params.id, now, (h) => {
    rebootReleased(c, groupName, h, "steady_state", now);
    return hostAudit(c.store.config?.fleet_id, "fleetlock.release", params.id, h.server_id, { group: groupName });
  });
  return { ok: true, released: released !== null };
}

/**
 * Releases the id's slot in the group, if held, and hands it to the first parked host. Both start
 * in this turn (audit enqueued, then the freed slot granted): a parked host's answer waits for
 * nothing but the grant's write.
 */
export async function releaseAndDrain(
  c: CoordinatorParts,
  groupName: string,
  id: string,
  now: number,
  entryOf: (released: Holder) => AuditEntry,
  opts: { wait: boolean } = { wait: false },
): Promise<Holder | null> {
  const next = release(c.store.group(groupName)!, id, now);
  c.store.saveGroup(groupName, next.group);
  const audited = next.released ? audit(c, [entryOf(next.released)], opts) : undefined;
  await Promise.all([audited, c.parked.drain(groupName)]);
  return next.released;
}

/** An operator's force release of one holder. */
export async function forceRelease(
  c: CoordinatorParts,
  settings: FleetSettings,
  name: string,
  id: string,
  actor: string,
): Promise<{ ok: true; released: Holder; group: GroupView } | Failure> {
  const config = c.store.syncSettings(settings);
  const group = c.store.group(name);
  if (!group) return fail("not_found", `reboot group '${name}' is not configured`);
  const now = c.clock();
  const held = entryNamed(group.holders, id, settings.fleet_id, (s) => c.store.servers.get(s)?.hostname);
  if (!held) return fail("not_held", `'${id}' holds no slot in reboot group '${name}' (${TRIED})`);
  // The freed slot goes to the first parked host now, not after the audit row reached D1.
  const released = (await releaseAndDrain(
    c,
    name,
    held.id,
    now,
    (r) => {
      rebootReleased(c, name, r, "force_release", now);
      return {
        actor,
        action: "reboot_group.force_release",
        target: `fleet:${settings.fleet_id}`,
        details: { group: name, id: r.id, server_id: r.server_id, granted_at: new Date(r.granted_at).toISOString() },
      };
    },
    { wait: true },
  ))!;
  return { ok: true, released, group: viewOf(c, config, name, c.store.group(name)!, now) };
}

/**
 * Releases every slot held for a server: it rebooted and came back (new boot_id) without its
 * steady-state call getting through, or it was removed. Audited here, so every caller is.
 */
export async function releaseServer(
  c: CoordinatorParts,
  serverId: string,
  opts: { reason: string; actor: string; granted_before?: number },
): Promise<(Holder & { group: string })[]> {
  const removal = opts.granted_before === undefined;
  const match = (h: Holder) => h.server_id === serverId && (removal || h.granted_at <= opts.granted_before!);
  const now = c.clock();
  const released: (Holder & { group: string })[] = [];
  if (removal) {
    c.gateStore.dropRecovering(serverId);
    c.disruption.dropServer(serverId);
  }
  for (const [name, group] of c.store.groups()) {
    // A reboot seen by the ledger frees a healthy_report slot only once the new boot is healthy.
    for (const h of group.holders)
      if (!removal && match(h) && waitsForHealth(group, h)) holdUntilHealthy(c, name, h, now, null);
    const next = releaseWhere(c.store.group(name)!, (h) => match(h) && (removal || !waitsForHealth(group, h)), now);
    if (next.released.length === 0) continue;
    c.store.saveGroup(name, next.group);
    released.push(...next.released.map((h) => ({ ...h, group: name })));
    for (const h of next.released) rebootReleased(c, name, h, removal ? "server_removed" : "rebooted", now);
  }
  for (const name of new Set(released.map((h) => h.group))) await c.parked.drain(name);
  await c.parked.rearm();
  if (released.length > 0) {
    await audit(
      c,
      [
        {
          actor: opts.actor,
          action: "fleetlock.release_server",
          target: `server:${serverId}`,
          details: {
            server_id: serverId,
            reason: opts.reason,
            released: released.map((h) => ({ group: h.group, id: h.id })),
          },
        },
      ],
      // Called from a ledger's outbox, never on a host's path: deliver before answering.
      { wait: true },
    );
  }
  return released;
}
