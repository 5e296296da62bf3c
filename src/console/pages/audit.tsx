/** @jsxImportSource hono/jsx */
/**
 * Audit: the log, newest first. The API filters by target (a server is `server:<id>`); actor,
 * action and time are matched here over the pages read (at most SCAN_PAGES), and the page says so.
 */
import type { z } from "zod";
import { AuditEntry } from "../../audit/schemas";
import { qs } from "../api";
import { render, type View } from "../context";
import { Ago, Field, Filters, Pager, Table } from "../ui";
import { scan, SCAN_PAGES } from "./servers";

const when = (text: string | undefined) => {
  const ms = text ? Date.parse(text) : NaN;
  return Number.isNaN(ms) ? undefined : ms;
};

export async function auditPage(v: View) {
  const q = v.c.req.query();
  const f = {
    actor: q.actor?.trim(),
    server: q.server?.trim(),
    action: q.action?.trim(),
    since: q.since?.trim(),
    until: q.until?.trim(),
  };
  const server = f.server && /^[0-9a-f-]{36}$/.test(f.server) ? f.server : undefined;
  const [since, until] = [when(f.since), when(f.until)];
  const narrowed = !!(f.actor || f.action || since || until);
  const keep = (e: z.output<typeof AuditEntry>) => {
    const at = Date.parse(e.at);
    return (
      (!f.actor || e.actor.includes(f.actor)) &&
      (!f.action || e.action.startsWith(f.action)) &&
      (!since || at >= since) &&
      (!until || at <= until)
    );
  };
  const path = (cursor?: string) =>
    `/v1/audit${qs({ target: server ? `server:${server}` : undefined, limit: narrowed ? 200 : 50, cursor })}`;
  const { rows, next, pages } = await scan(v, AuditEntry, path, keep, 50, q.cursor);
  // Newest first: once past `since`, older pages cannot match.
  const more = since && rows.length && Date.parse(rows[rows.length - 1].at) < since ? null : next;
  return render(
    v,
    "audit",
    "Audit",
    <>
      <h1>Audit log</h1>
      <Filters
        action="/console/audit"
        label="Filter the audit log"
        fleet={v.fleet}
        clear={`/console/audit${qs({ fleet: v.fleet })}`}
      >
        <Field label="Actor" name="actor" value={f.actor} placeholder="token:… or server:…" />
        <Field label="Server id" name="server" value={f.server} size={36} />
        <Field label="Action starts with" name="action" value={f.action} placeholder="server.decommission" />
        <Field label="Since" name="since" type="datetime-local" value={f.since} />
        <Field label="Until" name="until" type="datetime-local" value={f.until} />
      </Filters>
      {narrowed ? (
        <p class="muted small">
          Actor, action and time are matched here over {pages} page(s) of the log (up to {SCAN_PAGES * 200} entries a
          screen); the API filters by target only. Times are UTC.
        </p>
      ) : null}
      <Table id="audit" caption="Audit entries" head={["When", "Actor", "Action", "Target", "Details"]}>
        {rows.map((e) => (
          <tr>
            <td>
              <Ago at={e.at} />
            </td>
            <td class="mono">{e.actor}</td>
            <td>{e.action}</td>
            <td class="mono">
              {e.target.startsWith("server:") ? (
                <a href={`/console/servers/${e.target.slice(7)}`}>{e.target}</a>
              ) : (
                e.target
              )}
            </td>
            <td class="mono small">{e.details ? JSON.stringify(e.details).slice(0, 200) : ""}</td>
          </tr>
        ))}
      </Table>
      {rows.length === 0 ? <p>No entry matches.</p> : null}
      <Pager base="/console/audit" params={{ fleet: v.fleet, ...f, cursor: q.cursor }} next={more} />
    </>,
  );
}
