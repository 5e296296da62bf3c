/**
 * The console behind Cloudflare Access: a visit without a console session but with a valid Access
 * JWT (the header, else the CF_Authorization cookie) signs the user in at once, without a form:
 * a short-lived operator token is minted from the mapping and sealed into a console session, as
 * for a pasted token, both in one D1 batch. A JWT that does not verify, or a user no mapping names, is refused here (no
 * sign-in form would help: the identity is Access's to give).
 */
import type { Context } from "hono";
import { getCookie } from "hono/cookie";
import { DomainError } from "../domain/errors";
import type { Env } from "../env";
import { signInMinted } from "./session";
import { consoleStatusOf, type ErrorStatus } from "./statuses";
import { ACCESS_COOKIE, ACCESS_HEADER, accessConfig, verifyAccessJwt } from "../auth/access";
import { grantFor } from "../auth/sso-grant";
import { mintSession } from "../sso/service";

export type AccessSignIn = { started: true } | { started: false; status: ErrorStatus; message: string } | null;

/** A new console session from the request's Access JWT; null when there is none (or no Access). */
export async function accessSession(c: Context): Promise<AccessSignIn> {
  const env = c.env as Env;
  const config = accessConfig(env);
  const jwt = c.req.header(ACCESS_HEADER) ?? getCookie(c, ACCESS_COOKIE);
  if (!config || !jwt) return null;
  try {
    const { who, exp } = await verifyAccessJwt(config, jwt);
    const grant = await grantFor(env, who);
    await signInMinted(c, (heldBy) => mintSession(env, who, grant, "console", { providerExpiresAt: exp, heldBy }));
    return { started: true };
  } catch (err) {
    if (!(err instanceof DomainError)) throw err;
    return { started: false, status: consoleStatusOf(err.code), message: err.message };
  }
}
