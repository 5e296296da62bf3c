/**
 * Everything a server's ledger tells other bindings, as outbox effects (src/objects/kit/outbox.ts):
 * its D1 projection, its server-token row, its audit rows, its FleetLock identity and the release
 * of reboot slots after a reboot. Each is stored with the ledger state change that causes it and
 * delivered at least once; every receiver is idempotent.
 */
import { sql } from "drizzle-orm";
import type { Db } from "../db/client";
import { tokens } from "../db/schema";
import { auditInsertOnce, type AuditEvent } from "../audit/log";
import type { Env } from "../env";
import type { ServerIdentity } from "../fleetlock/durable-object";
import type { Effect } from "../objects/kit/outbox";
import type { ServerRecord } from "./record";
import { rolloutEventEffect } from "../rollouts/ledger-side";
import { coordinatorOf } from "../objects/stubs";

export type LedgerEffectKind = "project" | "token" | "audit" | "identity" | "release" | "rollout_event";

/** The server's token row in D1 (listing, and telling a server token apart on operator routes). */
export interface TokenRowPayload {
  server_id: string;
  name: string;
  hash: string;
  created_by: string;
  created_at: number;
  revoked_at: number | null;
}

export interface IdentityPayload {
  fleet_id: string;
  server_id: string;
  identity: ServerIdentity;
}

/** A reboot seen in a report: slots granted before `seen_at` belong to the previous boot. */
export interface ReleasePayload {
  fleet_id: string;
  server_id: string;
  from_boot_id: string;
  to_boot_id: string;
  seen_at: number;
}

export const tokenPayload = (record: ServerRecord, createdBy: string, revokedAt: number | null): TokenRowPayload => ({
  server_id: record.id,
  name: `server ${record.hostname}`,
  hash: record.token_hash,
  created_by: createdBy,
  created_at: record.created_at,
  revoked_at: revokedAt,
});

export const identityPayload = (record: ServerRecord, rev: number): IdentityPayload => ({
  fleet_id: record.fleet_id,
  server_id: record.id,
  identity: { fleetlock_id: record.fleetlock_id, hostname: record.hostname, reboot_group: record.reboot_group, rev },
});

export function ledgerEffects(env: () => Env, db: () => Db, project: Effect): Record<LedgerEffectKind, Effect> {
  return {
    project,
    token: {
      target: "d1",
      statements: (t: TokenRowPayload) => {
        const d = db();
        const row = {
          id: t.server_id,
          kind: "server" as const,
          scope: "server" as const,
          serverId: t.server_id,
          name: t.name,
          hash: t.hash || "revoked",
          createdBy: t.created_by,
          createdAt: t.created_at,
          revokedAt: t.revoked_at,
        };
        return [
          d.insert(tokens).values(row).onConflictDoUpdate({
            target: tokens.id,
            set: { hash: sql`excluded.hash`, revokedAt: sql`excluded.revoked_at`, name: sql`excluded.name` },
          }),
        ];
      },
    },
    audit: { target: "d1", statements: (e: AuditEvent) => [auditInsertOnce(db(), e)] },
    identity: {
      target: "call",
      deliver: async (p: IdentityPayload) => {
        await coordinatorOf(env(), p.fleet_id).setServerIdentity(p.server_id, p.identity);
      },
    },
    // Rollouts (issue 9): a target's outcome, keyed per rollout.
    rollout_event: rolloutEventEffect(env),
    release: {
      target: "call",
      deliver: async (p: ReleasePayload) => {
        await coordinatorOf(env(), p.fleet_id).releaseServer(p.server_id, {
          reason: `boot_id changed from '${p.from_boot_id}' to '${p.to_boot_id}'`,
          actor: `server:${p.server_id}`,
          granted_before: p.seen_at,
        });
      },
    },
  };
}
