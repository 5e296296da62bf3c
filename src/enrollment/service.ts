/**
 * Enrollment: a fleet's tokens that let a machine register itself (`POST /v1/agent/enroll`).
 *
 * The protocol, safe across a crash between any two steps:
 * 1. The token is checked (hash, not revoked, not expired).
 * 2. An enrollment row for (token, machine_id) is looked up. Found: this is a retry (the first
 *    answer was lost, or the process died before answering): go to 5.
 * 3. A fresh server id is claimed: one D1 batch writes the enrollment row (token, machine) → that
 *    id and spends one use (store.claimUse). Nothing else has happened yet; a crash here leaves a
 *    row whose server does not exist, which step 5 of a retry registers.
 * 4. The server is registered exactly as POST /v1/servers does, under that id
 *    (src/servers/service.ts: hostname and fleetlock_id reservations, the ledger commits). A
 *    refusal before the ledger committed (hostname_taken, …) gives the use back and removes the
 *    row. The answer is the server and its token.
 * 5. A retry: the recorded server gets a fresh token, the previous one revoked (a rotation); if the
 *    ledger has no such server yet (the crash came before its commit), it is registered now under
 *    the recorded id. A retry spends no use, so a used-up token still answers the machine it
 *    enrolled while the token lives.
 * Each enrollment leaves a `server.enroll` audit row naming the token; the ledger's own
 * `server.register` (or `server.token.rotate`) row names it as the actor too.
 */
import { getDb } from "../db/client";
import { DomainError, notFound } from "../domain/errors";
import type { Env } from "../env";
import { getFleet } from "../fleets/store";
import { canonicalJson } from "../lib/canonical-json";
import { digestsEqual, sha256Hex } from "../lib/crypto";
import { iso, isoOrNull } from "../lib/time";
import { issueEnrollmentToken, parseEnrollmentToken } from "../auth/tokens";
import { registerServer, rotateServerToken } from "../servers/service";
import { sortedLabels } from "../model/server/labels";
import { MAX_SERVER_LABELS } from "../domain/limits";
import { hostnameMatches } from "./pattern";
import { MAX_ENROLLMENT_TTL_MS, type EnrollInput, type EnrollmentTokenInput } from "./schemas";
import {
  claimUse,
  enrollmentOf,
  enrollmentTokenById,
  enrollmentTokenByKey,
  insertAudit,
  insertEnrollmentToken,
  listEnrollmentTokens,
  reissueSecret,
  releaseUse,
  revokeEnrollmentToken,
  type Claim,
  type EnrollmentTokenRow,
} from "./store";

/** Who an enrollment acts as, in the audit log: the token, by id. */
const enrollmentActor = (tokenId: string) => `enrollment-token:${tokenId}`;

export function enrollmentTokenView(r: EnrollmentTokenRow, now = Date.now()) {
  const state =
    r.revokedAt !== null ? "revoked" : r.expiresAt <= now ? "expired" : r.uses >= r.maxUses ? "used_up" : "active";
  return {
    id: r.id,
    fleet: r.fleetId,
    name: r.name,
    roles: r.roles,
    reboot_group: r.rebootGroup,
    labels: r.labels ?? {},
    kind: r.kind,
    hostname_pattern: r.hostnamePattern,
    max_uses: r.maxUses,
    uses: r.uses,
    expires_at: iso(r.expiresAt),
    created_at: iso(r.createdAt),
    created_by: r.createdBy,
    revoked_at: isoOrNull(r.revokedAt),
    last_used_at: isoOrNull(r.lastUsedAt),
    state: state as "active" | "expired" | "used_up" | "revoked",
  };
}

async function fleetOrNotFound(env: Env, fleet: string) {
  const row = await getFleet(getDb(env.DB), fleet);
  if (!row) throw notFound("fleet", fleet);
  return row;
}

/**
 * What makes two creates the same create: the fleet and the request as validated (defaults filled
 * in, labels in any order, the expiry as an instant), so a retry of the same command matches.
 */
const requestDigest = (fleet: string, input: EnrollmentTokenInput) =>
  sha256Hex(canonicalJson({ fleet, ...input, expires_at: Date.parse(input.expires_at) }));

const keyReused = (message: string, details?: unknown) => new DomainError("idempotency_key_reused", message, details);

/**
 * A new token; its secret is answered here only, its hash is what D1 keeps. With an
 * Idempotency-Key already used by this creator, the same request is answered with the token that
 * key made (a retry whose first answer was lost): the secret is never stored, so it is issued
 * again, and the one the lost answer carried stops working.
 */
export async function createEnrollmentToken(
  env: Env,
  actor: string,
  fleet: string,
  input: EnrollmentTokenInput,
  idempotencyKey?: string,
) {
  const db = getDb(env.DB);
  const now = Date.now();
  const fleetRow = await fleetOrNotFound(env, fleet);
  const digest = idempotencyKey === undefined ? null : await requestDigest(fleet, input);
  if (idempotencyKey !== undefined) {
    const previous = await enrollmentTokenByKey(db, actor, idempotencyKey);
    if (previous) return answerAgain(env, actor, fleetRow.createdAt, previous, digest);
  }
  const expiresAt = Date.parse(input.expires_at);
  if (!(expiresAt > now)) {
    throw new DomainError("validation_failed", "expires_at must be in the future", [
      { path: "expires_at", message: "in the past" },
    ]);
  }
  if (expiresAt > now + MAX_ENROLLMENT_TTL_MS) {
    throw new DomainError(
      "validation_failed",
      `expires_at is at most 30 days ahead (${iso(now + MAX_ENROLLMENT_TTL_MS)})`,
      [{ path: "expires_at", message: "more than 30 days ahead" }],
    );
  }
  const id = crypto.randomUUID();
  const { token, hash } = await issueEnrollmentToken(id);
  const row: EnrollmentTokenRow = {
    id,
    fleetId: fleet,
    name: input.name ?? null,
    hash,
    roles: input.roles,
    rebootGroup: input.reboot_group,
    labels: sortedLabels(input.labels),
    kind: input.kind,
    hostnamePattern: input.hostname_pattern ?? null,
    maxUses: input.max_uses,
    uses: 0,
    expiresAt,
    createdBy: actor,
    createdAt: now,
    revokedAt: null,
    lastUsedAt: null,
    idempotencyKey: idempotencyKey ?? null,
    requestDigest: digest,
  };
  const { name, roles, reboot_group, labels, kind, max_uses, hostname_pattern } = input;
  const inserted = await insertEnrollmentToken(db, row, {
    actor,
    action: "enrollment_token.create",
    target: `enrollment-token:${id}`,
    details: {
      fleet,
      name,
      roles,
      reboot_group,
      labels,
      kind,
      max_uses,
      hostname_pattern,
      expires_at: iso(expiresAt),
    },
  });
  if (!inserted) {
    // A create with the same key committed while this one ran: it is the one, answered again.
    const winner = idempotencyKey === undefined ? undefined : await enrollmentTokenByKey(db, actor, idempotencyKey);
    if (!winner) throw new Error(`enrollment token insert refused, and no token holds key ${idempotencyKey}`);
    return answerAgain(env, actor, fleetRow.createdAt, winner, digest);
  }
  return { ...enrollmentTokenView(row, now), token, replayed: false };
}

/** The token an Idempotency-Key made, answered again with its secret issued anew, when that is still safe. */
async function answerAgain(
  env: Env,
  actor: string,
  fleetCreatedAt: number,
  previous: EnrollmentTokenRow,
  digest: string | null,
) {
  const id = previous.id;
  if (previous.requestDigest !== digest) {
    throw keyReused(
      `this Idempotency-Key created enrollment token ${id} with another request; use a new key for a new token`,
      { token_id: id },
    );
  }
  const now = Date.now();
  const refusal = (row: EnrollmentTokenRow) =>
    row.createdAt < fleetCreatedAt
      ? `its token ${id} belongs to fleet '${row.fleetId}' as it was before it was deleted`
      : row.revokedAt !== null
        ? `its token ${id} was revoked at ${iso(row.revokedAt)}`
        : // A secret that enrolls nothing is of no use: not issued (nor audited) again.
          row.expiresAt <= now
          ? `its token ${id} expired at ${iso(row.expiresAt)}`
          : row.lastUsedAt !== null
            ? `its token ${id} was presented by a machine at ${iso(row.lastUsedAt)}, so its secret was received; it is not issued again`
            : null;
  const refused = refusal(previous);
  if (refused) throw keyReused(`this Idempotency-Key was used already: ${refused}`, { token_id: id });
  const { token, hash } = await issueEnrollmentToken(id);
  const db = getDb(env.DB);
  const after = await reissueSecret(
    db,
    previous,
    hash,
    {
      actor,
      action: "enrollment_token.reissue",
      target: `enrollment-token:${id}`,
      details: { fleet: previous.fleetId, why: "the create was sent again with its Idempotency-Key" },
    },
    now,
  );
  if (!after) {
    const current = await enrollmentTokenById(db, id);
    const why =
      (current && refusal(current)) ??
      `another request with this key answered token ${id} at the same time; the secret it answered is the one that works`;
    throw keyReused(`this Idempotency-Key was used already: ${why}`, { token_id: id });
  }
  return { ...enrollmentTokenView(after, now), token, replayed: true };
}

export async function listFleetEnrollmentTokens(env: Env, fleet: string, after: string | null, limit: number) {
  const { createdAt } = await fleetOrNotFound(env, fleet);
  return listEnrollmentTokens(getDb(env.DB), fleet, createdAt, after, limit);
}

/**
 * The token, of this fleet as it is now: a deleted fleet's tokens (kept, and refused by enroll)
 * are not found under it, nor under a fleet created again with its id.
 */
async function tokenOfFleet(env: Env, fleet: string, id: string) {
  const { createdAt } = await fleetOrNotFound(env, fleet);
  const row = await enrollmentTokenById(getDb(env.DB), id);
  if (!row || row.fleetId !== fleet || row.createdAt < createdAt) throw notFound("enrollment token", id);
  return row;
}

export async function getEnrollmentToken(env: Env, fleet: string, id: string) {
  return enrollmentTokenView(await tokenOfFleet(env, fleet, id));
}

/** Revoked at once: it enrolls nothing more, retries included. Servers it enrolled keep their own tokens. */
export async function revokeFleetEnrollmentToken(env: Env, actor: string, fleet: string, id: string) {
  const row = await tokenOfFleet(env, fleet, id);
  if (row.revokedAt !== null) return enrollmentTokenView(row);
  const at = Date.now();
  await revokeEnrollmentToken(getDb(env.DB), id, at, {
    actor,
    action: "enrollment_token.revoke",
    target: `enrollment-token:${id}`,
    details: { fleet },
  });
  return enrollmentTokenView((await enrollmentTokenById(getDb(env.DB), id)) ?? { ...row, revokedAt: at });
}

// ---- POST /v1/agent/enroll ----

const unauthorized = (message: string) => new DomainError("unauthorized", message);

/** The live token a bearer header names; every refusal is a 401. */
export async function liveEnrollmentToken(env: Env, header: string | undefined, now: number) {
  const bearer = header ? /^Bearer\s+(\S+)\s*$/i.exec(header)?.[1] : undefined;
  const parsed = bearer ? parseEnrollmentToken(bearer) : null;
  if (!bearer || !parsed) throw unauthorized("an enrollment token (Bearer hme.…) is required");
  const row = await enrollmentTokenById(getDb(env.DB), parsed.id);
  if (!row || !digestsEqual(row.hash, await sha256Hex(bearer))) throw unauthorized("not a valid enrollment token");
  if (row.revokedAt !== null) throw unauthorized("this enrollment token was revoked");
  if (row.expiresAt <= now) throw unauthorized(`this enrollment token expired at ${iso(row.expiresAt)}`);
  return row;
}

/** Refusals that come before the server's ledger commits: the claimed use is given back. */
const REFUSED_BEFORE_COMMIT = new Set(["hostname_taken", "fleetlock_id_taken", "unknown_fleet", "reservation_expired"]);

/** Points between the steps, where the crash tests cut the flow (a hook that throws is the crash). */
export interface EnrollHooks {
  afterRead?: () => Promise<void>;
  afterClaim?: (serverId: string) => Promise<void>;
  afterRegister?: (registered: { token: string }) => Promise<void>;
}

/** Enrolls the machine: the server as POST /v1/servers answers it, with its token (shown once). */
export async function enroll(env: Env, authorization: string | undefined, input: EnrollInput, hooks: EnrollHooks = {}) {
  const now = Date.now();
  const token = await liveEnrollmentToken(env, authorization, now);
  await hooks.afterRead?.();
  const db = getDb(env.DB);
  const actor = enrollmentActor(token.id);
  const hostname = input.hostname.toLowerCase();
  const previous = await enrollmentOf(db, token.id, input.machine_id);
  if (previous) return reenroll(env, token, input, previous);

  if (token.hostnamePattern !== null && !hostnameMatches(token.hostnamePattern, hostname)) {
    throw new DomainError(
      "hostname_not_allowed",
      `this enrollment token enrolls only hostnames matching '${token.hostnamePattern}'`,
      {
        hostname_pattern: token.hostnamePattern,
      },
    );
  }
  // Checked before a use is claimed: a refused enrollment uses nothing.
  enrolledLabels(token, input);
  if (token.uses >= token.maxUses)
    throw unauthorized(`this enrollment token is used up (${token.maxUses} of ${token.maxUses})`);
  // A fleet deleted and created again under the same id is another fleet: its old tokens do not enroll into it.
  const fleet = await getFleet(db, token.fleetId);
  if (!fleet || fleet.createdAt > token.createdAt)
    throw unauthorized(`this enrollment token's fleet '${token.fleetId}' no longer exists`);

  const claim: Claim = {
    tokenId: token.id,
    machineId: input.machine_id,
    serverId: crypto.randomUUID(),
    hostname,
    now,
    hash: token.hash,
  };
  if (!(await claimUse(db, claim))) {
    // Another enrollment of this machine won the race: answer as its retry.
    const raced = await enrollmentOf(db, token.id, input.machine_id);
    if (raced) return reenroll(env, token, input, raced);
    const current = await enrollmentTokenById(db, token.id);
    if (current && current.hash !== token.hash) throw unauthorized("not a valid enrollment token");
    throw unauthorized("this enrollment token is used up, revoked or expired");
  }
  await hooks.afterClaim?.(claim.serverId);
  let registered;
  try {
    registered = await registerServer(env, actor, registration(token, input), () => claim.serverId);
  } catch (err) {
    if (err instanceof DomainError && REFUSED_BEFORE_COMMIT.has(err.code)) await releaseUse(db, claim);
    throw err;
  }
  await hooks.afterRegister?.(registered);
  await audited(env, token, input, registered.view.record.id, false);
  return registered;
}

/** The token's labels with the machine's own over them; more than a server may carry is refused. */
function enrolledLabels(token: EnrollmentTokenRow, input: EnrollInput) {
  const labels = sortedLabels({ ...token.labels, ...input.labels });
  const n = Object.keys(labels).length;
  if (n > MAX_SERVER_LABELS) {
    throw new DomainError(
      "validation_failed",
      `the server would have ${n} labels (the token's and the body's); at most ${MAX_SERVER_LABELS}`,
      [
        {
          path: "labels",
          message: `at most ${MAX_SERVER_LABELS} labels, the token's ${Object.keys(token.labels ?? {}).length} included`,
        },
      ],
    );
  }
  return labels;
}

const registration = (token: EnrollmentTokenRow, input: EnrollInput) => ({
  fleet: token.fleetId,
  hostname: input.hostname,
  kind: token.kind,
  roles: token.roles,
  reboot_group: token.rebootGroup,
  labels: enrolledLabels(token, input),
  ...(input.fleetlock_id !== undefined ? { fleetlock_id: input.fleetlock_id } : {}),
});

/** The machine enrolled before with this token: the same server, a fresh token, the old one revoked. */
async function reenroll(
  env: Env,
  token: EnrollmentTokenRow,
  input: EnrollInput,
  previous: { serverId: string; hostname: string },
) {
  if (previous.hostname !== input.hostname.toLowerCase()) {
    throw new DomainError(
      "machine_enrolled",
      `machine '${input.machine_id}' was enrolled with this token as '${previous.hostname}'`,
      {
        server_id: previous.serverId,
        hostname: previous.hostname,
      },
    );
  }
  await secretStillIssued(env, token);
  const actor = enrollmentActor(token.id);
  let out;
  try {
    out = await rotateServerToken(env, actor, previous.serverId);
  } catch (err) {
    if (!(err instanceof DomainError && err.code === "not_found")) throw err;
    // The first attempt died between its claim and the ledger's commit: register it now.
    out = await registerServer(env, actor, registration(token, input), () => previous.serverId);
  }
  await audited(env, token, input, previous.serverId, true);
  return out;
}

/**
 * Refuses a secret issued again after this request checked it. Read once an enrollment row of the
 * token was seen: a claim sets last_used_at with its row, and a reissue needs it unset, so the
 * hash read now is the token's last.
 */
async function secretStillIssued(env: Env, token: EnrollmentTokenRow) {
  const current = await enrollmentTokenById(getDb(env.DB), token.id);
  if (!current || current.hash !== token.hash) throw unauthorized("not a valid enrollment token");
}

async function audited(env: Env, token: EnrollmentTokenRow, input: EnrollInput, serverId: string, retry: boolean) {
  await insertAudit(getDb(env.DB), {
    actor: enrollmentActor(token.id),
    action: "server.enroll",
    target: `server:${serverId}`,
    details: {
      token_id: token.id,
      fleet: token.fleetId,
      hostname: input.hostname.toLowerCase(),
      machine_id: input.machine_id,
      boot_id: input.boot_id,
      retry,
    },
  });
}
