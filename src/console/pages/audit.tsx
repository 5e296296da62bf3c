/** @jsxImportSource hono/jsx */
/**
 * Audit: the log, newest first. The API filters by target (a server by id or hostname: `server:<ref>`);
 * actor, action and time are matched here over the pages read (at most SCAN_PAGES), and the page
 * says so. Actors and targets are shown by name, details as text (../audit-text.tsx).
 */
import { AuditEntry } from "../../audit/schemas";
import { qs } from "../api";
import { actorNames, actorText, AuditDetails, type Entry, type Names } from "../audit-text";
import { render, type View } from "../context";
import { Ago, Field, Filters, Pager, serverHref, Table } from "../ui";
import { scan, SCAN_PAGES } from "./servers";

/** A target as a person reads it: a server by hostname (linked), else the kind and the id. */
const TargetText = ({ e, names }: { e: Entry; names: Names }) => {
  if (e.target.startsWith("server:")) {
    const id = e.target.slice(7);
    return e.hostname ? (
      <span title={e.target}>
        server <a href={serverHref({ id, hostname: e.hostname })}>{e.hostname}</a>
      </span>
    ) : (
      <span title={e.target}>
        server <a href={`/console/servers/${id}`}>{id.slice(0, 8)}</a>
      </span>
    );
  }
  if (e.target.startsWith("fleet:")) {
    const fleet = e.target.slice(6);
    return (
      <span>
        fleet <a href={`/console?fleet=${encodeURIComponent(fleet)}`}>{fleet}</a>
      </span>
    );
  }
  if (e.target.startsWith("rollout:")) {
    const id = e.target.slice(8);
    return (
      <span title={e.target}>
        rollout <a href={`/console/rollouts/${id}`}>{id.slice(0, 8)}</a>
      </span>
    );
  }
  if (e.target.startsWith("token:")) return actorText(e.target, names);
  const colon = e.target.indexOf(":");
  return colon > 0 ? (
    <span title={e.target}>
      {e.target.slice(0, colon).replace(/[-_]/g, " ")} <span class="mono">{e.target.slice(colon + 1)}</span>
    </span>
  ) : (
    <span class="mono">{e.target}</span>
  );
};

const when = (text: string | undefined) => {
  const ms = text ? Date.parse(text) : NaN;
  return Number.isNaN(ms) ? undefined : ms;
};

/** What the "server" filter may be: an id, a hostname or fleet/hostname (the API resolves it). */
const SERVER_REF = /^[A-Za-z0-9][A-Za-z0-9.-]{0,252}$|^[a-z0-9][a-z0-9-]{0,62}\/[A-Za-z0-9][A-Za-z0-9.-]{0,252}$/;

export async function auditPage(v: View) {
  const q = v.c.req.query();
  const f = {
    actor: q.actor?.trim(),
    server: q.server?.trim(),
    action: q.action?.trim(),
    since: q.since?.trim(),
    until: q.until?.trim(),
  };
  const server = f.server && SERVER_REF.test(f.server) ? f.server : undefined;
  const [since, until] = [when(f.since), when(f.until)];
  const narrowed = !!(f.actor || f.action || since || until);
  const actor = f.actor?.toLowerCase();
  const keep = (e: Entry) => {
    const at = Date.parse(e.at);
    return (
      (!f.actor || e.actor.toLowerCase().includes(actor!)) &&
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
  const names = await actorNames(v, rows);
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
        <Field label="Server (hostname or id)" name="server" value={f.server} size={28} />
        <Field label="Actor id contains" name="actor" value={f.actor} placeholder="token:… or server:…" />
        <Field label="Action starts with" name="action" value={f.action} placeholder="server.decommission" />
        <Field label="Since" name="since" type="datetime-local" value={f.since} />
        <Field label="Until" name="until" type="datetime-local" value={f.until} />
      </Filters>
      {f.server && !server ? (
        <p class="flash bad" role="alert">
          “{f.server}” is not a hostname or a server id: the log is shown unfiltered by server.
        </p>
      ) : null}
      {narrowed ? (
        <p class="muted small">
          Actor, action and time are matched here over {pages} page(s) of the log (up to {SCAN_PAGES * 200} entries a
          screen); the API filters by target (the server) only. Times are UTC.
        </p>
      ) : null}
      <Table id="audit" caption="Audit entries" head={["When", "Who", "Action", "Target", "Details"]}>
        {rows.map((e) => (
          <tr>
            <td>
              <Ago at={e.at} />
            </td>
            <td>{actorText(e.actor, names)}</td>
            <td>{e.action}</td>
            <td>
              <TargetText e={e} names={names} />
            </td>
            <td>
              <AuditDetails details={e.details} />
            </td>
          </tr>
        ))}
      </Table>
      {rows.length === 0 ? <p>No entry matches.</p> : null}
      <Pager base="/console/audit" params={{ fleet: v.fleet, ...f, cursor: q.cursor }} next={more} />
    </>,
  );
}
