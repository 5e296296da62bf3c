/** @jsxImportSource hono/jsx */
/** Sign-in: an operator token is exchanged for a session cookie; sign-out ends it. */
import { Hono } from "hono";
import { parseToken } from "../../auth/tokens";
import { apiFor, type InProcessApp } from "../api";
import { backTo } from "../context";
import { checkSignInCsrf, requireCsrf, type ConsoleEnv } from "../guard";
import {
  currentSession,
  endSession,
  readConsoleCookie,
  setConsoleCookie,
  signInMinted,
  startSession,
  tokenGrant,
} from "../session";
import { BOOTSTRAP_ID } from "../../domain/principal";
import { randomSecret } from "../../lib/crypto";
import { consoleStatusOf, type ErrorStatus } from "../statuses";
import { Page } from "../ui";
import { DomainError } from "../../domain/errors";
import { oidcConfig } from "../../sso/oidc";
import { completeLogin, startLogin } from "../../sso/logins";

const SIGN_IN_COOKIE = "hm_signin";
const SSO_COOKIE = "hm_sso";

function SignInPage(props: { csrf: string; next: string; message?: { ok: boolean; text: string }; sso?: boolean }) {
  return (
    <Page frame={{ title: "Sign in", session: null, flash: props.message ?? null }}>
      <div class="signin card">
        <h1>Sign in to Harbormaster</h1>
        {props.sso ? (
          <p>
            <a class="button primary" href={`/console/sso?next=${encodeURIComponent(props.next)}`}>
              Sign in with SSO
            </a>
          </p>
        ) : null}
        <form method="post" action="/console/sign-in">
          <input type="hidden" name="_csrf" value={props.csrf} />
          <input type="hidden" name="next" value={props.next} />
          <label>
            Operator token
            <input type="password" name="token" autocomplete="off" required spellcheck={false} maxlength={200} />
          </label>
          <p class="muted small">
            A token from <code>hm tokens create</code> (or the deployment's ADMIN_TOKEN). It stays on the server; your
            browser keeps only a session cookie, which ends after 8 hours or when you sign out.
          </p>
          <button type="submit" class="primary">
            Sign in
          </button>
        </form>
      </div>
    </Page>
  );
}

export function signInRoutes(getApp: () => InProcessApp) {
  return (
    new Hono<ConsoleEnv>()
      .get("/console/sign-in", async (c) => {
        if (await currentSession(c)) return c.redirect("/console", 303);
        const csrf = randomSecret();
        setConsoleCookie(c, SIGN_IN_COOKIE, csrf, 1800);
        const q = c.req.query();
        const message = q.ended
          ? { ok: false, text: "Your session ended: sign in again." }
          : q.signed_out
            ? { ok: true, text: "Signed out." }
            : undefined;
        return c.html(
          <SignInPage
            csrf={csrf}
            next={backTo(q.next, "/console")}
            message={message}
            sso={oidcConfig(c.env) !== null}
          />,
        );
      })
      .post("/console/sign-in", async (c) => {
        await checkSignInCsrf(c);
        const form = await c.req.parseBody();
        const token = typeof form.token === "string" ? form.token.trim() : "";
        const next = backTo(form.next, "/console");
        const again = (text: string, status: 401 | 403) => {
          const csrf = readConsoleCookie(c, SIGN_IN_COOKIE) ?? "";
          return c.html(
            <SignInPage csrf={csrf} next={next} message={{ ok: false, text }} sso={oidcConfig(c.env) !== null} />,
            status,
          );
        };
        // The API decides whether the token is an operator's: the console asks it as any client would.
        const probe = token ? await apiFor(c, getApp, token)("GET", "/v1/fleets?limit=1") : { status: 401 };
        if (probe.status === 403) return again("That is a server's token; sign in with an operator token.", 403);
        if (probe.status !== 200) return again("That token was not accepted.", 401);
        const id = parseToken(token)?.id ?? BOOTSTRAP_ID;
        const grant = await tokenGrant(c.env, id);
        if (!grant) return again("That token was not accepted.", 401);
        await startSession(c, { id, ...grant, secret: token });
        setConsoleCookie(c, SIGN_IN_COOKIE, "", 0);
        return c.redirect(next, 303);
      })
      // OpenID Connect: off to the provider, bound to this browser by a cookie the callback must show.
      // Lax, not Strict: the provider's redirect back is a cross-site navigation.
      .get("/console/sso", async (c) => {
        const config = oidcConfig(c.env);
        if (!config) return c.text("OpenID Connect sign-in is not configured on this deployment.", 404);
        const browser = randomSecret();
        const origin = new URL(c.req.url).origin;
        try {
          const url = await startLogin(c.env, config, {
            origin,
            client: "console",
            returnTo: backTo(c.req.query("next"), "/console"),
            browser,
          });
          setConsoleCookie(c, SSO_COOKIE, browser, 600, "Lax");
          return c.redirect(url, 303);
        } catch (err) {
          if (err instanceof DomainError) return c.text(err.message, consoleStatusOf(err.code));
          throw err;
        }
      })
      .get("/console/sso/callback", async (c) => {
        const config = oidcConfig(c.env);
        if (!config) return c.text("OpenID Connect sign-in is not configured on this deployment.", 404);
        const q = c.req.query();
        const refuse = (text: string, status: ErrorStatus) => {
          const csrf = randomSecret();
          setConsoleCookie(c, SIGN_IN_COOKIE, csrf, 1800);
          return c.html(<SignInPage csrf={csrf} next="/console" message={{ ok: false, text }} sso />, status);
        };
        if (typeof q.error === "string") return refuse(`The identity provider refused: ${q.error.slice(0, 100)}`, 401);
        const { state, code } = q;
        if (!state || !code || state.length > 200 || code.length > 2000) {
          return refuse("That sign-in answer is incomplete: start again.", 400);
        }
        try {
          // A console sign-in's session is stored in its token's batch (and its cookie set); hm's gets none.
          const done = await signInMinted(c, (consoleSession) =>
            completeLogin(c.env, config, {
              origin: new URL(c.req.url).origin,
              state,
              code,
              browser: readConsoleCookie(c, SSO_COOKIE),
              consoleSession,
            }),
          );
          setConsoleCookie(c, SSO_COOKIE, "", 0, "Lax");
          return c.redirect(done.returnTo, 303);
        } catch (err) {
          if (!(err instanceof DomainError)) throw err;
          return refuse(err.message, consoleStatusOf(err.code));
        }
      })
      .post("/console/sign-out", requireCsrf, async (c) => {
        await endSession(c, c.get("session"));
        return c.redirect("/console/sign-in?signed_out=1", 303);
      })
  );
}
