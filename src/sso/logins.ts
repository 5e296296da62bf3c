/**
 * The OpenID sign-in flow around the provider: a row per sign-in under way (sso_logins), consumed
 * by deleting it, so a replayed callback or a second exchange of hm's one-time code finds nothing.
 */
import { and, eq, gt, lt } from "drizzle-orm";
import { getDb } from "../db/client";
import { ssoLogins } from "../db/schema";
import { DomainError } from "../domain/errors";
import type { Env } from "../env";
import { sha256Hex } from "../lib/crypto";
import { authorizeUrl, identityFromCode, randomToken, s256, type OidcConfig } from "./oidc";
import { grantFor } from "../auth/sso-grant";
import { mintSession, type HolderWrites } from "./service";

/** Time to sign in at the provider; time for hm to exchange its code once the browser is back. */
const LOGIN_TTL_MS = 10 * 60_000;
const CODE_TTL_MS = 2 * 60_000;

const callbackUrl = (origin: string) => `${origin}/console/sso/callback`;

/** Starts a sign-in: its row, and the provider's URL to send the browser to. */
export async function startLogin(
  env: Env,
  config: OidcConfig,
  p: { origin: string; client: "console" | "cli"; returnTo: string; browser?: string; cliChallenge?: string },
) {
  const state = randomToken();
  const nonce = randomToken();
  const verifier = randomToken();
  const now = Date.now();
  const url = await authorizeUrl(config, { redirectUri: callbackUrl(p.origin), state, nonce, verifier });
  const db = getDb(env.DB);
  await db.batch([
    db.delete(ssoLogins).where(lt(ssoLogins.expiresAt, now)),
    db.insert(ssoLogins).values({
      stateHash: await sha256Hex(state),
      client: p.client,
      verifier,
      nonce,
      returnTo: p.returnTo,
      browserHash: p.browser ? await sha256Hex(p.browser) : null,
      cliChallenge: p.cliChallenge ?? null,
      codeHash: null,
      identity: null,
      createdAt: now,
      expiresAt: now + LOGIN_TTL_MS,
    }),
  ]);
  return url;
}

const expired = () =>
  new DomainError("unauthorized", "this sign-in is unknown, was used already or took too long: start again");

/**
 * The provider's callback: the sign-in row is taken (deleted) by its state, the code exchanged and
 * the identity mapped. A console sign-in gets its session token; a cli sign-in a one-time code for
 * hm's loopback listener, the identity waiting in a new row until hm exchanges it. `consoleSession`
 * gives the rows of the console's session, written in the token's own batch.
 */
export async function completeLogin(
  env: Env,
  config: OidcConfig,
  p: { origin: string; state: string; code: string; browser?: string; consoleSession: HolderWrites },
) {
  const db = getDb(env.DB);
  const [row] = await db
    .delete(ssoLogins)
    .where(and(eq(ssoLogins.stateHash, await sha256Hex(p.state)), gt(ssoLogins.expiresAt, Date.now())))
    .returning();
  if (!row || row.codeHash !== null) throw expired();
  if (row.client === "console" && (!p.browser || row.browserHash !== (await sha256Hex(p.browser)))) {
    // Another browser's callback (a link sent to a victim): it must not sign this one in.
    throw new DomainError("forbidden", "this sign-in was started in another browser: start again here");
  }
  const { who } = await identityFromCode(config, {
    code: p.code,
    redirectUri: callbackUrl(p.origin),
    verifier: row.verifier,
    nonce: row.nonce,
  });
  const grant = await grantFor(env, who);
  if (row.client === "console") {
    return {
      client: "console" as const,
      returnTo: row.returnTo,
      session: await mintSession(env, who, grant, "console", { heldBy: p.consoleSession }),
    };
  }
  const code = randomToken();
  const now = Date.now();
  await db.insert(ssoLogins).values({
    ...row,
    stateHash: await sha256Hex(`code:${code}`),
    codeHash: await sha256Hex(code),
    identity: { subject: who.subject, email: who.email, groups: who.groups },
    createdAt: now,
    expiresAt: now + CODE_TTL_MS,
  });
  const back = new URL(row.returnTo);
  back.searchParams.set("code", code);
  return { client: "cli" as const, returnTo: back.toString() };
}

/** hm's exchange: its one-time code and its PKCE verifier for a short-lived operator token. */
export async function exchangeCliCode(env: Env, p: { code: string; verifier: string }) {
  const db = getDb(env.DB);
  const [row] = await db
    .delete(ssoLogins)
    .where(and(eq(ssoLogins.codeHash, await sha256Hex(p.code)), gt(ssoLogins.expiresAt, Date.now())))
    .returning();
  if (!row?.identity || !row.cliChallenge) throw expired();
  if ((await s256(p.verifier)) !== row.cliChallenge) {
    throw new DomainError("unauthorized", "the code verifier does not match this sign-in: start again");
  }
  const who = { provider: "oidc" as const, ...row.identity };
  // The mapping is read again: one removed since the browser came back gives nothing.
  const grant = await grantFor(env, who);
  return mintSession(env, who, grant, "cli");
}
