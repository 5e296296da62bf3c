/** @jsxImportSource hono/jsx */
/**
 * A fleet's enrollment tokens: list, create (the token shown on the answer to the creating POST
 * only, never stored in a cookie nor shown again), revoke.
 */
import { Hono } from "hono";
import { EnrollmentToken, EnrollmentTokenCreated, REPLAYED_HEADER } from "../../enrollment/schemas";
import { ApiFailure, readPage, send, type InProcessApp } from "../api";
import { action, NoFleet, page, render, type View } from "../context";
import { requireCsrf, requireSession, type ConsoleEnv } from "../guard";
import { Ago, Badge, canWrite, DangerForm, Table } from "../ui";

const tokensPath = (fleet: string) => `/v1/fleets/${encodeURIComponent(fleet)}/enrollment-tokens`;
const here = (fleet: string) => `/console/enrollment?fleet=${encodeURIComponent(fleet)}`;
const STATE_TONE: Record<string, string> = { active: "active", expired: "stale", used_up: "idle", revoked: "removed" };
const LIFETIMES: [string, number][] = [
  ["1 hour", 3600],
  ["1 day", 86400],
  ["7 days", 7 * 86400],
  ["30 days", 30 * 86400],
];

const CreateForm = ({ v }: { v: View }) => (
  // A plain form (not data-enhance): its answer is the page that shows the new token, once.
  <form
    method="post"
    action={`/console/enrollment/create?fleet=${encodeURIComponent(v.fleet!)}`}
    class="create"
    aria-label="Create an enrollment token"
  >
    <input type="hidden" name="_csrf" value={v.session.csrf} />
    {/* One key per form shown: the same form sent again (its answer lost, or the page reloaded) is the same create. */}
    <input type="hidden" name="idempotency_key" value={crypto.randomUUID()} />
    <input type="hidden" name="shown_at" value={String(Date.now())} />
    <label>
      Name <input name="name" maxlength={100} placeholder="what it is for" />
    </label>
    <label>
      Expires in
      <select name="lifetime">
        {LIFETIMES.map(([label, s]) => (
          <option value={String(s)} selected={s === 86400}>
            {label}
          </option>
        ))}
      </select>
    </label>
    <label>
      Machines it may enroll <input name="max_uses" type="number" min={1} max={100000} value="1" required />
    </label>
    <label>
      Roles <input name="roles" placeholder="web, cache" />
    </label>
    <label>
      Reboot group <input name="reboot_group" value="default" required />
    </label>
    <label>
      Kind
      <select name="kind">
        <option value="managed" selected>
          managed
        </option>
        <option value="manual">manual</option>
      </select>
    </label>
    <label>
      Hostname pattern <input name="hostname_pattern" placeholder="web-*.example.com" />
    </label>
    <button type="submit">Create token</button>
  </form>
);

async function enrollmentPage(v: View, created?: { token: string; id: string; replayed: boolean }, refused?: string) {
  if (!v.fleet) return render(v, "overview", "Enrollment tokens", <NoFleet session={v.session} />);
  const list = await readPage(v, EnrollmentToken, `${tokensPath(v.fleet)}?limit=500`);
  const write = canWrite(v.session);
  const origin = new URL(v.c.req.url).origin;
  return render(
    v,
    "overview",
    `Enrollment tokens of ${v.fleet}`,
    <>
      <h1>
        Enrollment tokens of <span class="mono">{v.fleet}</span>
      </h1>
      <p class="muted small">
        A machine joins the fleet by itself with one:{" "}
        <code>curl -fsSL {origin}/install.sh | sudo sh -s -- --token hme.…</code>
      </p>
      {refused ? (
        <div class="flash bad" role="alert">
          <strong>✕ Not created: </strong>
          {refused}
        </div>
      ) : null}
      {created ? (
        <section class="card" id="new-token" aria-labelledby="h-new-token" role="status">
          <h2 id="h-new-token">New token: copy it now, it is never shown again</h2>
          {created.replayed ? (
            <p class="flash" id="token-replayed">
              This form was sent before: it is the same token, its secret issued again. The one shown then no longer
              works.
            </p>
          ) : null}
          <p>
            <code class="mono" id="token-value">
              {created.token}
            </code>
          </p>
          <p class="small">
            Install the agent with it:{" "}
            <code>
              curl -fsSL {origin}/install.sh | sudo sh -s -- --token {created.token}
            </code>
          </p>
        </section>
      ) : null}
      <Table
        id="enrollment-tokens"
        caption="Enrollment tokens"
        head={[
          "Name",
          "State",
          ["Uses", "num"],
          "Roles",
          "Group",
          "Hostnames",
          "Expires",
          "Created",
          ...(write ? ["Revoke"] : []),
        ]}
      >
        {list.items.map((t) => (
          <tr data-token-id={t.id}>
            <td>{t.name ?? <span class="muted mono">{t.id.slice(0, 8)}</span>}</td>
            <td>
              <Badge status={STATE_TONE[t.state] ?? "idle"} label={t.state.replace("_", " ")} />
            </td>
            <td class="num">
              {t.uses}/{t.max_uses}
            </td>
            <td>{t.roles.join(", ") || <span class="muted">none</span>}</td>
            <td>{t.reboot_group}</td>
            <td class="mono">{t.hostname_pattern ?? <span class="muted">any</span>}</td>
            <td>
              <Ago at={t.expires_at} />
            </td>
            <td>
              <Ago at={t.created_at} /> by {t.created_by}
            </td>
            {write ? (
              <td>
                {t.state === "revoked" ? (
                  <span class="muted">revoked</span>
                ) : (
                  <DangerForm
                    action={`/console/enrollment/${t.id}/revoke?fleet=${encodeURIComponent(v.fleet!)}`}
                    csrf={v.session.csrf}
                    back={here(v.fleet!)}
                    label={`Revoke ${t.name ?? t.id}`}
                    button="Revoke"
                  />
                )}
              </td>
            ) : null}
          </tr>
        ))}
      </Table>
      {list.items.length === 0 ? <p>No enrollment token yet.</p> : null}
      {write ? (
        <>
          <h2>New token</h2>
          <CreateForm v={v} />
        </>
      ) : null}
    </>,
  );
}

/** How long a shown form's time is taken as the start of the token's lifetime. */
const SHOWN_AT_TRUSTED_MS = 3600_000;

const words = (s: string | undefined) => (s ?? "").split(/[\s,]+/).filter(Boolean);

export function enrollmentPages(getApp: () => InProcessApp) {
  return new Hono<ConsoleEnv>()
    .get(
      "/console/enrollment",
      requireSession,
      page(getApp, "overview", (v) => enrollmentPage(v)),
    )
    .post(
      "/console/enrollment/create",
      requireCsrf,
      page(getApp, "overview", async (v) => {
        if (!v.fleet) return enrollmentPage(v);
        const form = (await v.c.req.parseBody()) as Record<string, string>;
        const lifetime = Number(form.lifetime);
        // The lifetime counts from when the form was shown (within the hour), so the same form sent
        // again is the same request for its Idempotency-Key, not one with a later expiry.
        const now = Date.now();
        const shown = Number(form.shown_at);
        const from = Number.isFinite(shown) && shown <= now && now - shown < SHOWN_AT_TRUSTED_MS ? shown : now;
        const key = form.idempotency_key;
        const answer = await v.api(
          "POST",
          tokensPath(v.fleet),
          {
            ...(form.name?.trim() ? { name: form.name.trim() } : {}),
            expires_at: new Date(from + (Number.isFinite(lifetime) ? lifetime : 86400) * 1000).toISOString(),
            max_uses: Number(form.max_uses),
            roles: words(form.roles),
            reboot_group: form.reboot_group?.trim() || "default",
            kind: form.kind === "manual" ? "manual" : "managed",
            ...(form.hostname_pattern?.trim() ? { hostname_pattern: form.hostname_pattern.trim() } : {}),
          },
          typeof key === "string" && key ? { "Idempotency-Key": key } : undefined,
        );
        // A refusal (a bad pattern, a read token) is shown above the form, which the operator fixes.
        if (!answer.ok && answer.status !== 401) {
          const err = (answer.json as { error?: { code?: string; message?: string; details?: unknown } } | null)?.error;
          const fields = Array.isArray(err?.details)
            ? ` (${(err.details as { path: string; message: string }[]).map((d) => `${d.path}: ${d.message}`).join("; ")})`
            : "";
          return enrollmentPage(v, undefined, `${err?.message ?? `the API answered ${answer.status}`}${fields}`);
        }
        if (!answer.ok) throw new ApiFailure(401, "unauthorized", "the session's token no longer works");
        const created = answer.json as import("zod").output<typeof EnrollmentTokenCreated>;
        return enrollmentPage(v, { ...created, replayed: answer.headers.get(REPLAYED_HEADER) === "true" });
      }),
    )
    .post(
      "/console/enrollment/:id/revoke",
      requireCsrf,
      action(getApp, "/console/enrollment", async (v) => {
        const t = await send(
          v,
          EnrollmentToken,
          "DELETE",
          `${tokensPath(v.fleet!)}/${encodeURIComponent(v.c.req.param("id")!)}`,
        );
        return `enrollment token ${t.name ?? t.id} is revoked: it enrolls nothing more.`;
      }),
    );
}
