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
  startSession,
  tokenGrant,
  BOOTSTRAP_TOKEN_ID,
} from "../session";
import { randomSecret } from "../../lib/crypto";
import { Page } from "../ui";

const SIGN_IN_COOKIE = "hm_signin";

function SignInPage(props: { csrf: string; next: string; message?: { ok: boolean; text: string } }) {
  return (
    <Page frame={{ title: "Sign in", session: null, flash: props.message ?? null }}>
      <div class="signin card">
        <h1>Sign in to Harbormaster</h1>
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
  return new Hono<ConsoleEnv>()
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
      return c.html(<SignInPage csrf={csrf} next={backTo(q.next, "/console")} message={message} />);
    })
    .post("/console/sign-in", async (c) => {
      await checkSignInCsrf(c);
      const form = await c.req.parseBody();
      const token = typeof form.token === "string" ? form.token.trim() : "";
      const next = backTo(form.next, "/console");
      const again = (text: string, status: 401 | 403) => {
        const csrf = readConsoleCookie(c, SIGN_IN_COOKIE) ?? "";
        return c.html(<SignInPage csrf={csrf} next={next} message={{ ok: false, text }} />, status);
      };
      // The API decides whether the token is an operator's: the console asks it as any client would.
      const probe = token ? await apiFor(c, getApp, token)("GET", "/v1/fleets?limit=1") : { status: 401 };
      if (probe.status === 403) return again("That is a server's token; sign in with an operator token.", 403);
      if (probe.status !== 200) return again("That token was not accepted.", 401);
      const id = parseToken(token)?.id ?? BOOTSTRAP_TOKEN_ID;
      const grant = await tokenGrant(c.env, id);
      if (!grant) return again("That token was not accepted.", 401);
      await startSession(c, { id, ...grant, secret: token });
      setConsoleCookie(c, SIGN_IN_COOKIE, "", 0);
      return c.redirect(next, 303);
    })
    .post("/console/sign-out", requireCsrf, async (c) => {
      await endSession(c, c.get("session"));
      return c.redirect("/console/sign-in?signed_out=1", 303);
    });
}
