/**
 * What a server's ledger does for reboot coordination, kept here so the ledger itself only calls
 * in: when a report shows a new boot_id, the server rebooted and came back, so any slot it still
 * holds is one whose steady-state call was lost. The report never fails because of this; a
 * release the coordinator could not take is stored and retried from the ledger's alarm.
 */
import type { Env } from "../env";
import type { ServerRecord } from "../ledger/record";
import { coordinatorOf } from "./stub";

const PENDING = "fleetlock_release_pending";
const MAX_RETRY_DELAY_MS = 5 * 60_000;

interface PendingRelease {
  fleet_id: string;
  from_boot_id: string;
  to_boot_id: string;
  /** When the new boot was seen: slots granted after it belong to the new boot and are kept. */
  seen_at: number;
  attempts: number;
}

export async function releaseAfterReboot(
  storage: DurableObjectStorage,
  env: Env,
  record: ServerRecord,
  fromBootId: string,
  toBootId: string,
  seenAt: number,
) {
  await attempt(storage, env, record.id, {
    fleet_id: record.fleet_id,
    from_boot_id: fromBootId,
    to_boot_id: toBootId,
    seen_at: seenAt,
    attempts: 0,
  });
}

/** Called from the ledger's alarm; a no-op unless a release is pending. */
export async function retryPendingRelease(storage: DurableObjectStorage, env: Env, serverId: string) {
  const pending = storage.kv.get<PendingRelease>(PENDING);
  if (pending) await attempt(storage, env, serverId, pending);
}

async function attempt(storage: DurableObjectStorage, env: Env, serverId: string, p: PendingRelease) {
  try {
    await coordinatorOf(env, p.fleet_id).releaseServer(serverId, {
      reason: `boot_id changed from '${p.from_boot_id}' to '${p.to_boot_id}'`,
      actor: `server:${serverId}`,
      granted_before: p.seen_at,
    });
    storage.kv.delete(PENDING);
  } catch (err) {
    const attempts = p.attempts + 1;
    storage.kv.put(PENDING, { ...p, attempts } satisfies PendingRelease);
    const at = Date.now() + Math.min(1000 * 2 ** (attempts - 1), MAX_RETRY_DELAY_MS);
    // The alarm is shared with projection retries: only ever bring it forward.
    const current = await storage.getAlarm();
    if (current === null || current > at) await storage.setAlarm(at);
    console.warn(`release of reboot slots for server ${serverId} failed (attempt ${attempts}); retrying`, err);
  }
}
