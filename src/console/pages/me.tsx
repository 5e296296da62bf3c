/** @jsxImportSource hono/jsx */
/**
 * "You": who the session acts as, through what it signed in, and what it may do — the same
 * rules the API applies to its token (scope, fleets, expiry), said in words so nobody learns
 * them from a refusal.
 */
import type { OperatorVia } from "../../domain/principal";
import type { Scope } from "../../domain/enums";
import { render, type View } from "../context";
import type { Session } from "../session";
import { Ago } from "../ui";

const THROUGH: Record<OperatorVia, string> = {
  token: "an operator token",
  bootstrap: "the deployment's ADMIN_TOKEN secret",
  access: "Cloudflare Access (single sign-on)",
  oidc: "your identity provider (OpenID Connect)",
};

/** What each scope adds, weakest first: a scope includes every line before its own. */
const ABILITIES: [Scope, string][] = [
  ["read", "See servers, reboot groups, rollouts, drift, images and the audit log"],
  ["write", "Change them: desired configs, rollouts, holds, drift fixes, enrollment tokens, webhooks"],
  ["admin", "Administer: create and revoke tokens, delete fleets, run data upgrades"],
];

const RANK: Record<Scope, number> = { read: 0, write: 1, admin: 2 };

/** Whether the session sees every fleet (deployment-wide changes need that). */
const everyFleet = (s: Session) => s.fleets === "*";

export async function mePage(v: View) {
  const s = v.session;
  const all = everyFleet(s);
  return render(
    v,
    undefined,
    "You",
    <>
      <h1>You</h1>
      <div class="card">
        <dl class="kv">
          <dt>Signed in as</dt>
          <dd id="me-name">
            {s.name}
            {s.description ? <span class="muted"> — {s.description}</span> : null}
          </dd>
          <dt>Through</dt>
          <dd id="me-via">{THROUGH[s.via]}</dd>
          <dt>Scope</dt>
          <dd id="me-scope">{s.scope}</dd>
          <dt>Fleets</dt>
          <dd id="me-fleets">{s.fleets === "*" ? "every fleet, present and future" : s.fleets.join(", ") || "none"}</dd>
          <dt>Session ends</dt>
          <dd>
            <Ago at={new Date(s.expiresAt).toISOString()} />
            {s.tokenExpiresAt !== null ? (
              <span class="muted">
                {" "}
                (the token expires <Ago at={new Date(s.tokenExpiresAt).toISOString()} />)
              </span>
            ) : null}
          </dd>
        </dl>
      </div>
      <h2>What you may do</h2>
      <ul id="me-may">
        {ABILITIES.map(([scope, text]) =>
          RANK[scope] <= RANK[s.scope] ? (
            <li>
              ✓ {text}
              {all ? "" : " — in your fleets only"}
            </li>
          ) : (
            <li class="muted">
              ✕ {text} (needs scope {scope})
            </li>
          ),
        )}
        {all ? (
          <li>✓ Deployment-wide changes (the image catalog, agent builds, data upgrades)</li>
        ) : (
          <li class="muted">
            ✕ Deployment-wide changes (the image catalog, agent builds, data upgrades): they need a token of every fleet
          </li>
        )}
      </ul>
      {s.scope === "admin" ? (
        <p>
          <a href="/console/sessions" id="me-sessions">
            Single sign-on sessions
          </a>
          : who is signed in through the identity provider, and ending a session.
        </p>
      ) : null}
      {all ? null : (
        <p class="muted">
          Fleets outside your list are not shown anywhere, and are answered as if they did not exist; counts and lists
          cover your fleets only.
        </p>
      )}
    </>,
  );
}
