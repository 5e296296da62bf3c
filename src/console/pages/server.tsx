/** @jsxImportSource hono/jsx */
/** One server: desired against reported per agent, lifecycle, FleetLock, audit trail, and its actions. */
import { Hono } from "hono";
import type { z } from "zod";
import { AuditEntry } from "../../audit/schemas";
import { GroupSchema } from "../../fleetlock/schemas";
import { ServerDetail, ServerToken } from "../../servers/schemas";
import { must, qs, read, readPage, send, type InProcessApp } from "../api";
import { action, confirmTyped, render, type View } from "../context";
import { requireCsrf, type ConsoleEnv } from "../guard";
import { ActionForm, Ago, Badge, canWrite, DangerForm, Pager, serverHref, Table } from "../ui";
import { actorNames, actorText, AuditDetails } from "../audit-text";

const idOf = (v: View) => v.c.req.param("id")!;

async function holdsOf(v: View, s: z.output<typeof ServerDetail>) {
  const path = `/v1/fleets/${encodeURIComponent(s.fleet)}/reboot-groups/${encodeURIComponent(s.reboot_group)}`;
  const res = await v.api<z.output<typeof GroupSchema>>("GET", path);
  if (!res.ok) return null;
  const g = res.json;
  const mine = (x: { id: string; server: { id: string } | null }) =>
    x.server?.id === s.id || (s.fleetlock_id && x.id === s.fleetlock_id);
  return { group: g, holder: g.holders.find(mine) ?? null, queued: g.queue.find(mine) ?? null };
}

export async function serverDetailPage(v: View) {
  // An id or a hostname (the API resolves it; ?fleet= picks one when several fleets have it).
  const ref = idOf(v);
  const asked = v.c.req.query("fleet");
  const s = await read(v, ServerDetail, `/v1/servers/${encodeURIComponent(ref)}${qs({ fleet: asked })}`);
  const id = s.id;
  v.fleet = s.fleet;
  const [holds, audit] = await Promise.all([
    holdsOf(v, s),
    readPage(v, AuditEntry, `/v1/audit${qs({ target: `server:${id}`, limit: 20, cursor: v.c.req.query("cursor") })}`),
  ]);
  const names = await actorNames(v, audit.items);
  const back = serverHref(s);
  const csrf = v.session.csrf;
  const write = canWrite(v.session) && s.state !== "removed";
  return render(
    v,
    "servers",
    s.hostname,
    <>
      <h1>
        {s.hostname} <Badge status={s.status} /> <Badge status={s.state} />
      </h1>
      <div class="grid" id="server-facts" data-live="">
        <section class="card" aria-labelledby="h-facts">
          <h2 id="h-facts">Server</h2>
          <dl class="kv">
            <dt>Id</dt>
            <dd class="mono">{s.id}</dd>
            <dt>Fleet</dt>
            <dd>
              <a href={`/console?fleet=${encodeURIComponent(s.fleet)}`}>{s.fleet}</a>
            </dd>
            <dt>Kind</dt>
            <dd>{s.kind}</dd>
            <dt>Roles</dt>
            <dd>{s.roles.join(", ") || "none"}</dd>
            <dt>Labels</dt>
            <dd>
              {Object.entries(s.labels ?? {})
                .map(([k, val]) => `${k}=${val}`)
                .join(", ") || "none"}
            </dd>
            <dt>Generation</dt>
            <dd>
              desired {s.desired_generation}, reported {s.reported_generation ?? "none yet"}
            </dd>
            <dt>Last report</dt>
            <dd>
              <Ago at={s.last_seen} />
              {s.last_seen ? <span class="muted small"> (exact, from the server's own ledger)</span> : null}
            </dd>
            <dt>Planning</dt>
            <dd>
              {s.planning.mode}
              {s.planning.pinned_by ? ` by ${s.planning.pinned_by}` : ""}
            </dd>
            <dt>Lifecycle</dt>
            <dd>
              {s.lifecycle ? (
                <>
                  <Badge status="decommissioning" label={s.lifecycle.order} /> generation {s.lifecycle.generation},
                  asked <Ago at={s.lifecycle.requested_at} /> by <span class="mono">{s.lifecycle.requested_by}</span>
                  {s.lifecycle.cleanup_from ? (
                    <>
                      {" "}
                      · acknowledged <Ago at={s.lifecycle.cleanup_from} />
                    </>
                  ) : (
                    <> · not acknowledged yet</>
                  )}
                </>
              ) : (
                "run"
              )}
            </dd>
            <dt>Refresh</dt>
            <dd>
              {s.refresh ? (
                <>
                  asked <Ago at={s.refresh.requested_at} />,{" "}
                  {s.refresh.answered_at ? (
                    <>
                      answered <Ago at={s.refresh.answered_at} />
                    </>
                  ) : (
                    "not answered yet"
                  )}
                </>
              ) : (
                "none asked"
              )}
            </dd>
          </dl>
        </section>
        <section class="card" aria-labelledby="h-lock">
          <h2 id="h-lock">FleetLock</h2>
          <dl class="kv">
            <dt>Identity</dt>
            <dd class="mono">{s.fleetlock_id ?? "none (not a FleetLock client)"}</dd>
            <dt>Reboot group</dt>
            <dd>
              <a href={`/console/groups/${encodeURIComponent(s.reboot_group)}?fleet=${encodeURIComponent(s.fleet)}`}>
                {s.reboot_group}
              </a>
            </dd>
            <dt>Holds</dt>
            <dd>
              {holds?.holder ? (
                <>
                  <Badge
                    status={holds.holder.stuck ? "stuck" : "running"}
                    label={holds.holder.stuck ? "holds a slot, stuck" : "holds a slot"}
                  />{" "}
                  since <Ago at={holds.holder.granted_at} />
                </>
              ) : holds?.queued ? (
                <>
                  <Badge status="queued" label={`queued, position ${holds.queued.position}`} /> since{" "}
                  <Ago at={holds.queued.waiting_since} />
                </>
              ) : (
                "no slot, not queued"
              )}
            </dd>
          </dl>
        </section>
      </div>
      <h2>Agents: desired against reported</h2>
      <Table id="server-agents" caption="Agents" head={["Agent", "Status", "Desired", "Reported", "Errors"]}>
        {s.agents.map((a) => (
          <tr>
            <td>{a.name}</td>
            <td>
              <Badge status={a.status} />
            </td>
            <td class="mono">{a.desired ? `${a.desired.image}` : "— (to remove)"}</td>
            <td class="mono">{a.reported ? `${a.reported.image} · ${a.reported.state}` : "not reported"}</td>
            <td>
              {a.errors.length ? (
                a.errors.map((e) => (
                  <div class="t-bad">
                    ✕ {e.op}: {e.message}
                  </div>
                ))
              ) : (
                <span class="muted">none</span>
              )}
            </td>
          </tr>
        ))}
      </Table>
      {s.agents.length === 0 ? <p class="muted">No agent is desired or reported.</p> : null}
      {write ? (
        <>
          <h2>Actions</h2>
          <div class="actions">
            <ActionForm action={`/console/servers/${id}/refresh`} csrf={csrf} back={back} label="Refresh">
              <button type="submit">Ask for a report now</button>
            </ActionForm>
            <ActionForm action={`/console/servers/${id}/token`} csrf={csrf} back={back} label="Rotate token">
              <button type="submit">Rotate its token</button>
            </ActionForm>
            {s.state === "decommissioning" ? (
              <ActionForm
                action={`/console/servers/${id}/decommission/cancel`}
                csrf={csrf}
                back={back}
                label="Cancel decommission"
              >
                <button type="submit">Cancel the decommission</button>
              </ActionForm>
            ) : (
              <DangerForm
                action={`/console/servers/${id}/decommission`}
                csrf={csrf}
                back={back}
                label="Decommission"
                typed={{ prompt: "Type the hostname to decommission", pattern: s.hostname.replace(/[.]/g, "\\.") }}
                button="Decommission"
              />
            )}
          </div>
        </>
      ) : null}
      <h2>Audit trail</h2>
      <Table id="server-audit" caption="Audit trail" head={["When", "Who", "What", "Details"]}>
        {audit.items.map((e) => (
          <tr>
            <td>
              <Ago at={e.at} />
            </td>
            <td>{actorText(e.actor, names)}</td>
            <td>{e.action}</td>
            <td>
              <AuditDetails details={e.details} />
            </td>
          </tr>
        ))}
      </Table>
      <Pager
        base={`/console/servers/${encodeURIComponent(s.hostname)}`}
        params={{ fleet: s.fleet, cursor: v.c.req.query("cursor") }}
        next={audit.next_cursor}
      />
    </>,
  );
}

export function serverActions(getApp: () => InProcessApp) {
  const fallback = "/console/servers";
  const post = (v: View, path: string, body?: unknown) => must(v.api("POST", `/v1/servers/${idOf(v)}${path}`, body));
  return new Hono<ConsoleEnv>()
    .post(
      "/console/servers/:id{[0-9a-f-]{36}}/refresh",
      requireCsrf,
      action(getApp, fallback, async (v) => {
        await post(v, "/refresh");
        return "a report was asked for; the page updates when it arrives.";
      }),
    )
    .post(
      "/console/servers/:id{[0-9a-f-]{36}}/decommission",
      requireCsrf,
      action(getApp, fallback, async (v, form) => {
        const s = await read(v, ServerDetail, `/v1/servers/${idOf(v)}`);
        confirmTyped(form, s.hostname, "the server's hostname");
        await post(v, "/decommission", {});
        return `${s.hostname} is decommissioning.`;
      }),
    )
    .post(
      "/console/servers/:id{[0-9a-f-]{36}}/decommission/cancel",
      requireCsrf,
      action(getApp, fallback, async (v) => {
        await post(v, "/decommission/cancel");
        return "the decommission was cancelled.";
      }),
    )
    .post(
      "/console/servers/:id{[0-9a-f-]{36}}/token",
      requireCsrf,
      action(getApp, fallback, async (v) => {
        const out = await send(v, ServerToken, "POST", `/v1/servers/${idOf(v)}/token`);
        // The new token is shown once, on this answer, never through a redirect or a cookie.
        return render(
          v,
          "servers",
          "New server token",
          <div class="card">
            <h1>New token for the server</h1>
            <p>
              The old token stopped working. Copy this one into the host's agent configuration now: it is not shown
              again.
            </p>
            <code class="secret" id="new-token">
              {out.token}
            </code>
            <p>
              <a href={`/console/servers/${out.id}`}>Back to the server</a>
            </p>
          </div>,
        );
      }),
    );
}
