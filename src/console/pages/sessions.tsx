/** @jsxImportSource hono/jsx */
/**
 * Active single sign-on sessions (admins): who is signed in, through which provider, from the
 * console or hm, with what, until when; ending one revokes its token, which signs the user out
 * of every page and closes their live sockets.
 */
import { Hono } from "hono";
import { z } from "zod";
import { PROVIDER_NAMES } from "../../auth/sso-mapping";
import { SsoSession } from "../../sso/schemas";
import { read, send, type InProcessApp } from "../api";
import { action, page, render, type View } from "../context";
import { requireCsrf, requireSession, type ConsoleEnv } from "../guard";
import { Ago, DangerForm, Table } from "../ui";

async function sessionsPage(v: View) {
  const { items } = await read(v, z.object({ items: z.array(SsoSession) }), "/v1/sso/sessions");
  return render(
    v,
    undefined,
    "Sessions",
    <>
      <h1>Single sign-on sessions</h1>
      <p class="muted small">
        Each is a short-lived token minted when someone signed in. Ending one signs its user out everywhere it is used;
        they can sign in again if a mapping still names them.
      </p>
      <Table
        id="sso-sessions"
        caption="Active sessions"
        head={["User", "Through", "From", "Scope", "Fleets", "Started", "Ends", "End"]}
      >
        {items.map((s) => (
          <tr data-session={s.token_id}>
            <td>{s.email ?? <span class="mono">{s.subject}</span>}</td>
            <td>{PROVIDER_NAMES[s.provider]}</td>
            <td>{s.client === "cli" ? "hm" : "console"}</td>
            <td>{s.scope}</td>
            <td>{s.fleets === "*" ? "every fleet" : s.fleets.join(", ")}</td>
            <td>
              <Ago at={s.created_at} />
            </td>
            <td>
              <Ago at={s.expires_at} />
            </td>
            <td>
              <DangerForm
                action={`/console/sessions/${s.token_id}/end`}
                csrf={v.session.csrf}
                back="/console/sessions"
                label={`End the session of ${s.email ?? s.subject}`}
                button="End"
              />
            </td>
          </tr>
        ))}
      </Table>
      {items.length === 0 ? <p id="no-sessions">Nobody is signed in through single sign-on.</p> : null}
    </>,
  );
}

export function sessionPages(getApp: () => InProcessApp) {
  return new Hono<ConsoleEnv>().get("/console/sessions", requireSession, page(getApp, undefined, sessionsPage)).post(
    "/console/sessions/:id/end",
    requireCsrf,
    action(getApp, "/console/sessions", async (v) => {
      const ended = await send(
        v,
        z.object({ token_id: z.string() }),
        "DELETE",
        `/v1/sso/sessions/${encodeURIComponent(v.c.req.param("id")!)}`,
      );
      return `session ${ended.token_id.slice(0, 8)} ended: its user is signed out.`;
    }),
  );
}
