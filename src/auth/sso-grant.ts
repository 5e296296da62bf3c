/**
 * The grant an SSO identity signs in with (a Cloudflare Access JWT on an API call or a console
 * visit, an OpenID Connect login): the mappings that name it, read from D1 on every sign-in, so a
 * mapping removed takes effect at once; the rules are ./sso-mapping.ts.
 */
import { getDb } from "../db/client";
import { DomainError } from "../domain/errors";
import type { Env } from "../env";
import { grantOf, PROVIDER_NAMES, specRule, type Identity, type SsoGrant } from "./sso-mapping";
import { mappingsFor } from "./store";

/** Who the identity is to Harbormaster: its grant, or a refusal that says why it gets nothing. */
export async function grantFor(env: Env, who: Identity): Promise<SsoGrant> {
  const { all, ofFleets } = await mappingsFor(getDb(env.DB), who);
  // A spec's row reaches its own fleet only: it is read as a mapping on that one fleet.
  const grant = grantOf(who, [...all, ...ofFleets.map(specRule)]);
  if (!grant) {
    throw new DomainError(
      "forbidden",
      `signed in as ${who.email ?? who.subject} through ${PROVIDER_NAMES[who.provider]}, but no SSO mapping ` +
        "names this user or one of their groups: ask an admin to add one (hm sso mappings add)",
      { email: who.email, groups: who.groups.slice(0, 20) },
    );
  }
  return grant;
}
