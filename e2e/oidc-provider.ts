/**
 * A real OpenID provider for the tests (the `oidc-provider` package, with its development login
 * and consent pages: any login name signs in as that user). The OpenID e2e test and the browser
 * test run it beside a server configured with OIDC_ISSUER / OIDC_CLIENT_ID / OIDC_CLIENT_SECRET.
 */
import type { Server } from "node:http";
import Provider from "oidc-provider";

const OIDC_CLIENT_ID = "harbormaster";
const OIDC_CLIENT_SECRET = "test-client-secret-0123456789";

/** The `wrangler dev` arguments that point a server at the provider on `port`. */
export const oidcVars = (issuer: string) => [
  "--var",
  `OIDC_ISSUER:${issuer}`,
  "--var",
  `OIDC_CLIENT_ID:${OIDC_CLIENT_ID}`,
  "--var",
  `OIDC_CLIENT_SECRET:${OIDC_CLIENT_SECRET}`,
];

/** Starts the provider on `port`; `users` maps a login name to its email and groups. */
export function startOidcProvider(
  port: number,
  serverUrl: string,
  users: Record<string, { email: string; groups: string[] }>,
): Server {
  const provider = new Provider(`http://127.0.0.1:${port}`, {
    clients: [
      {
        client_id: OIDC_CLIENT_ID,
        client_secret: OIDC_CLIENT_SECRET,
        redirect_uris: [`${serverUrl}/console/sso/callback`],
        grant_types: ["authorization_code"],
        response_types: ["code"],
      },
    ],
    claims: { openid: ["sub"], email: ["email", "email_verified", "groups"] },
    conformIdTokenClaims: false,
    pkce: { required: () => true },
    cookies: { keys: ["test-cookie-key-0123456789"] },
    ttl: { Interaction: 600, Session: 3600, Grant: 3600, AccessToken: 600, IdToken: 600, AuthorizationCode: 60 },
    findAccount: async (_ctx, id) => ({
      accountId: id,
      claims: async () => ({ sub: id, email: users[id]?.email, email_verified: true, groups: users[id]?.groups ?? [] }),
    }),
  });
  return provider.listen(port);
}
