/** @jsxImportSource hono/jsx */
/**
 * Servers: the list (GET /v1/servers: fleet, status, state; GET /v1/instances: agent, image) and
 * one server's page (server.tsx). A hostname is a prefix the API reads from its hostname index
 * (`hostname=prefix*`), so the page costs the same however large the fleet. Labels go to the API
 * as `label=` terms (its label index answers them). The API has no role filter: the console
 * narrows the pages it reads (at most SCAN_PAGES of them) and says so.
 */
import { Hono } from "hono";
import { SERVER_STATES, SERVER_STATUSES } from "../../domain/enums";
import type { z } from "zod";
import { Instance } from "../../instances/schemas";
import { ServerDetail, ServerSummary } from "../../servers/schemas";
import { qs, readPage, type InProcessApp } from "../api";
import { NoFleet, page, render, staleAfterOf, type View } from "../context";
import { requireSession, type ConsoleEnv } from "../guard";
import { Badge, ExactTime, Field, Filters, LastReport, naturally, Pager, Select, serverHref, Table } from "../ui";
import { serverDetailPage, serverActions } from "./server";

export const SCAN_PAGES = 5;
const PAGE = 50;

/** "zone=eu-1a, rack" (commas or spaces) as the API's repeated `label=` terms. */
function labelTerms(text: string | undefined): string[] {
  return (text ?? "").split(/[\s,]+/).filter(Boolean);
}
const withLabels = (path: string, terms: string[]) =>
  terms.length
    ? `${path}${path.includes("?") ? "&" : "?"}${terms.map((t) => `label=${encodeURIComponent(t)}`).join("&")}`
    : path;
const labelsText = (labels: Record<string, string> | undefined) =>
  Object.entries(labels ?? {}).map(([k, v]) => `${k}=${v}`);

/** Reads pages of `path` until `want` rows pass `keep` or SCAN_PAGES pages were read. */
type AgentRow = z.output<typeof ServerDetail>["agents"][number];

/**
 * One agent's image and version as a list shows it: what runs, and where it should go when that
 * differs ("1.4.0 → 1.5.0"); the full references on hover.
 */
const AgentVersion = ({ a }: { a: AgentRow }) => {
  const title = [
    a.reported ? `runs ${a.reported.image}` : "not reported",
    a.desired ? `should run ${a.desired.image}` : "to remove",
  ].join("; ");
  return (
    <span class="agentver" title={title}>
      {a.name} <span class="mono">{a.reported?.version ?? "—"}</span>
      {a.desired && a.reported?.image !== a.desired.image ? (
        <>
          {" "}
          → <span class="mono">{a.desired.version}</span>
        </>
      ) : null}
    </span>
  );
};

/** How many rows of a list a page reads from their ledgers: every row of a page, never more. */
const LEDGER_READS = 50;

/**
 * The listed servers as their own ledgers see them (one read each, in parallel, a page at most):
 * the exact last report (a host that keeps reporting the same thing, or only polls, moves the
 * index's time only every few minutes) and the agents' images and versions. A read that fails
 * leaves the row to the index's figures.
 */
export async function ledgerViews(v: View, ids: string[]) {
  const views = await Promise.all(
    ids
      .slice(0, LEDGER_READS)
      .map((id) =>
        v.api<z.output<typeof ServerDetail>>("GET", `/v1/servers/${id}`).then((r) => (r.ok ? r.json : null)),
      ),
  );
  return new Map(ids.slice(0, LEDGER_READS).map((id, n) => [id, views[n]]));
}

export async function scan<S extends z.ZodType>(
  v: View,
  item: S,
  path: (cursor?: string) => string,
  keep: (row: z.output<S>) => unknown,
  want: number,
  cursor?: string,
) {
  const rows: z.output<S>[] = [];
  let next: string | null = cursor ?? null;
  let pages = 0;
  do {
    const res = await readPage(v, item, path(next ?? undefined));
    rows.push(...res.items.filter(keep));
    next = res.next_cursor;
    pages++;
  } while (next && rows.length < want && pages < SCAN_PAGES);
  return { rows, next, pages };
}

async function serversPage(v: View) {
  if (!v.fleet) return render(v, "servers", "Servers", <NoFleet session={v.session} />);
  const q = v.c.req.query();
  const f = {
    fleet: v.fleet,
    status: q.status,
    state: q.state,
    hostname: q.hostname?.trim(),
    role: q.role?.trim(),
    agent: q.agent?.trim(),
    image: q.image?.trim(),
    labels: q.labels?.trim(),
  };
  const terms = labelTerms(f.labels);
  const params = { ...f, cursor: q.cursor };
  const byInstance = !!(f.agent || f.image);
  const host = f.hostname?.toLowerCase();
  // What the API cannot take as a hostname prefix (an underscore, a space) is matched here instead.
  const prefix = host && /^[a-z0-9.-]+$/.test(host) ? `${host}*` : undefined;
  const narrowed = !!((host && !prefix) || f.role);
  const form = (
    <Filters
      action="/console/servers"
      label="Search servers"
      fleet={v.fleet}
      button="Search"
      clear={`/console/servers?fleet=${encodeURIComponent(v.fleet)}`}
    >
      <Field label="Hostname starts with" name="hostname" value={f.hostname} />
      <Select name="status" label="Status" options={SERVER_STATUSES} value={f.status} />
      <Select name="state" label="State" options={SERVER_STATES} value={f.state} />
      <Field label="Role" name="role" value={f.role} size={10} />
      <Field label="Labels" name="labels" value={f.labels} size={16} placeholder="zone=eu-1a, rack" />
      <Field label="Agent" name="agent" value={f.agent} size={10} />
      <Field label="Image" name="image" value={f.image} placeholder="registry/name:tag" />
    </Filters>
  );
  if (byInstance) {
    // /v1/instances has no fleet filter: rows of other fleets are left out here.
    const path = (cursor?: string) =>
      withLabels(`/v1/instances${qs({ agent: f.agent, image: f.image, limit: 200, cursor })}`, terms);
    const { rows, next } = await scan(v, Instance, path, (r) => r.fleet === v.fleet, PAGE, q.cursor);
    return render(
      v,
      "servers",
      "Servers",
      <>
        <h1>Agent instances</h1>
        {form}
        <Table id="instances" caption="Agent instances" head={["Server", "Agent", "Status", "Desired", "Reported"]}>
          {rows.map((r) => (
            <tr>
              <td>
                <a href={`/console/servers/${r.server_id}?fleet=${encodeURIComponent(v.fleet!)}`} class="mono">
                  {r.server_id.slice(0, 8)}
                </a>
              </td>
              <td>{r.agent}</td>
              <td>
                <Badge status={r.status} />
              </td>
              <td class="mono">{r.desired?.image ?? "—"}</td>
              <td class="mono">{r.reported ? `${r.reported.image} (${r.reported.state ?? "?"})` : "—"}</td>
            </tr>
          ))}
        </Table>
        {rows.length === 0 ? <p>No instance matches.</p> : null}
        <Pager base="/console/servers" params={params} next={next} />
      </>,
    );
  }
  const path = (cursor?: string) =>
    withLabels(
      `/v1/servers${qs({ fleet: v.fleet, status: f.status, state: f.state, hostname: prefix, limit: narrowed ? 200 : PAGE, cursor })}`,
      terms,
    );
  const keep = (s: z.output<typeof ServerSummary>) =>
    (!host || prefix || s.hostname.toLowerCase().startsWith(host)) && (!f.role || s.roles.includes(f.role));
  const found = await scan(v, ServerSummary, path, keep, PAGE, q.cursor);
  const { next, pages } = found;
  // The index pages in text order (sim-10 before sim-2); a page is shown as people count.
  const rows = naturally(found.rows, (x) => x.hostname);
  const [ledgers, staleAfter] = [
    await ledgerViews(
      v,
      rows.map((x) => x.id),
    ),
    staleAfterOf(v, v.fleet),
  ];
  return render(
    v,
    "servers",
    "Servers",
    <>
      <h1>Servers</h1>
      {form}
      {narrowed ? (
        <p class="muted small">
          {f.role ? "Role is" : "The hostname is"} matched here over {pages} page(s) of the index ({pages * 200} servers
          at most); the API filters by fleet, status, state and hostname prefix.
        </p>
      ) : null}
      <Table
        id="servers"
        caption="Servers"
        head={[
          "Hostname",
          "Status",
          "State",
          "Agents and versions",
          "Roles",
          "Labels",
          "Reboot group",
          ["Generation", "num"],
          "Last report",
        ]}
      >
        {rows.map((s) => (
          <tr>
            <td>
              <a href={serverHref(s)}>{s.hostname}</a>
            </td>
            <td>
              <Badge status={s.status} />
            </td>
            <td>
              <Badge status={s.state} />
            </td>
            <td class="versions">
              {ledgers.get(s.id)?.agents.length ? (
                ledgers.get(s.id)!.agents.map((a) => (
                  <div>
                    <AgentVersion a={a} />
                  </div>
                ))
              ) : (
                <span class="muted">{ledgers.get(s.id) ? "none" : "unknown"}</span>
              )}
            </td>
            <td>{s.roles.join(", ") || <span class="muted">none</span>}</td>
            <td class="labels">
              {labelsText(s.labels).map((l) => (
                <code class="label">{l}</code>
              ))}
              {labelsText(s.labels).length ? null : <span class="muted">none</span>}
            </td>
            <td>{s.reboot_group}</td>
            <td class="num">
              {s.reported_generation ?? "—"}/{s.desired_generation}
            </td>
            <td>
              {ledgers.get(s.id) ? (
                <ExactTime at={ledgers.get(s.id)!.last_seen} />
              ) : (
                <LastReport at={s.last_seen} status={s.status} staleAfterS={staleAfter} />
              )}
            </td>
          </tr>
        ))}
      </Table>
      {rows.length === 0 ? <p>No server matches.</p> : null}
      <Pager base="/console/servers" params={params} next={next} />
    </>,
  );
}

export function serverPages(getApp: () => InProcessApp) {
  return (
    new Hono<ConsoleEnv>()
      .get("/console/servers", requireSession, page(getApp, "servers", serversPage))
      // A server by id, hostname or (with ?fleet=) a hostname of that fleet: the API resolves the name.
      .get(
        "/console/servers/:id{[A-Za-z0-9][A-Za-z0-9.-]{0,252}}",
        requireSession,
        page(getApp, "servers", serverDetailPage),
      )
      .route("/", serverActions(getApp))
  );
}
