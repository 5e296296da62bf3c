/** @jsxImportSource hono/jsx */
/**
 * All fleets at a glance: one row per fleet, from that fleet's summary (GET /v1/fleets/{fleet}/summary,
 * the overview's one request) and its newest fleet-level audit entry. A page holds PAGE fleets, so
 * a large estate costs the same per screen; the pager reaches the rest.
 */
import type { z } from "zod";
import { AuditEntry } from "../../audit/schemas";
import { Fleet } from "../../fleets/schemas";
import { FleetSummary } from "../../status/schemas";
import { qs, read, readPage } from "../api";
import { NoFleet, render, type View } from "../context";
import { Ago, Badge, Pager, Table, naturally } from "../ui";

const PAGE = 25;

/** The statuses a row names when any server has them, worst first: the row reads left to right. */
const SHOWN: [status: keyof FleetSummary["servers"]["by_status"], label: string][] = [
  ["failed", "failed"],
  ["stale", "stale"],
  ["drifted", "drifted"],
  ["pending", "converging"],
  ["unknown", "never reported"],
  ["realized", "realized"],
];

interface Row {
  fleet: z.output<typeof Fleet>;
  summary: FleetSummary;
  /** The newest fleet-level audit entry (settings, channels, roles, reboot groups, created). */
  audit: z.output<typeof AuditEntry> | null;
}

/** The fleet's last change: its newest fleet-level audit entry or its newest rollout step, whichever is later. */
function lastChange(r: Row): { at: string; what: string } | null {
  const candidates: { at: string; what: string }[] = [];
  if (r.audit) candidates.push({ at: r.audit.at, what: r.audit.action });
  for (const ro of r.summary.rollouts) candidates.push({ at: ro.updated_at, what: `rollout of ${ro.agent}` });
  candidates.sort((a, b) => Date.parse(b.at) - Date.parse(a.at));
  return candidates[0] ?? null;
}

const FleetRow = ({ r }: { r: Row }) => {
  const f = encodeURIComponent(r.fleet.id);
  const s = r.summary;
  const paused = s.reboot_groups.filter((g) => g.paused);
  const busy = s.reboot_groups.filter((g) => g.holders > 0 || g.queue_length > 0);
  const stuck = s.reboot_groups.reduce((n, g) => n + g.stuck, 0);
  const running = s.rollouts.filter((ro) => ro.state === "running" || ro.state === "rolling_back");
  const change = lastChange(r);
  const present = SHOWN.filter(([k]) => s.servers.by_status[k] > 0);
  return (
    <tr data-fleet={r.fleet.id}>
      <th scope="row">
        <a href={`/console?fleet=${f}`}>{r.fleet.id}</a>
      </th>
      <td>
        <span class="n" data-count="total">
          {s.servers.total}
        </span>{" "}
        server{s.servers.total === 1 ? "" : "s"}
        <ul class="chips">
          {present.map(([k, label]) => (
            <li>
              <a href={`/console/servers?fleet=${f}&status=${k}`} data-status-count={k}>
                <Badge status={k} label={`${s.servers.by_status[k]} ${label}`} />
              </a>
            </li>
          ))}
          {s.servers.by_state.decommissioning > 0 ? (
            <li>
              <a href={`/console/servers?fleet=${f}&state=decommissioning`} data-status-count="decommissioning">
                <Badge status="decommissioning" label={`${s.servers.by_state.decommissioning} decommissioning`} />
              </a>
            </li>
          ) : null}
        </ul>
      </td>
      <td data-groups="">
        {s.reboot_groups.length === 0 ? (
          <span class="muted">none yet</span>
        ) : (
          <>
            {s.reboot_groups.length} group{s.reboot_groups.length === 1 ? "" : "s"}
            <ul class="chips">
              {paused.map((g) => (
                <li>
                  <a href={`/console/groups/${encodeURIComponent(g.name)}?fleet=${f}`}>
                    <Badge status="paused" label={`${g.name} paused`} />
                  </a>
                </li>
              ))}
              {busy.map((g) => (
                <li>
                  <a href={`/console/groups/${encodeURIComponent(g.name)}?fleet=${f}`}>
                    <Badge
                      status="running"
                      label={`${g.name}: ${g.holders}/${g.slots} rebooting${g.queue_length ? `, ${g.queue_length} queued` : ""}`}
                    />
                  </a>
                </li>
              ))}
              {stuck ? (
                <li>
                  <Badge status="stuck" label={`${stuck} stuck`} />
                </li>
              ) : null}
            </ul>
            {paused.length + busy.length === 0 ? <span class="muted"> all idle</span> : null}
          </>
        )}
      </td>
      <td data-rollouts="">
        {s.rollouts.length === 0 ? (
          <span class="muted">none</span>
        ) : (
          <ul class="plain">
            {s.rollouts.map((ro) => (
              <li>
                <a href={`/console/rollouts/${ro.id}?fleet=${f}`}>
                  {ro.agent} → <span class="mono">{ro.version}</span>
                </a>{" "}
                <Badge status={ro.state} /> {ro.counts.done}/{ro.total}
              </li>
            ))}
          </ul>
        )}
        {running.length === 0 && s.rollouts.length > 0 ? <span class="muted small"> (none moving)</span> : null}
      </td>
      <td data-last-change="">
        {change ? (
          <>
            <Ago at={change.at} />
            <br />
            <span class="small muted">{change.what}</span>
          </>
        ) : (
          <span class="muted">nothing yet</span>
        )}
      </td>
    </tr>
  );
};

export async function fleetsPage(v: View) {
  // No fleet is "in view" here: the switcher picks one, and no single fleet's feed is followed.
  v.fleet = undefined;
  if (v.fleets.length === 0) return render(v, "fleets", "All fleets", <NoFleet session={v.session} />);
  const cursor = v.c.req.query("cursor");
  const list = await readPage(v, Fleet, `/v1/fleets${qs({ limit: PAGE, cursor })}`);
  const rows: Row[] = await Promise.all(
    naturally(list.items, (f) => f.id).map(async (fleet) => {
      const f = encodeURIComponent(fleet.id);
      const [summary, audit] = await Promise.all([
        read(v, FleetSummary, `/v1/fleets/${f}/summary`),
        readPage(v, AuditEntry, `/v1/audit${qs({ target: `fleet:${fleet.id}`, limit: 1 })}`),
      ]);
      return { fleet, summary, audit: audit.items[0] ?? null };
    }),
  );
  return render(
    v,
    "fleets",
    "All fleets",
    <>
      <h1>All fleets</h1>
      <Table
        id="fleets"
        caption="Fleets"
        head={["Fleet", "Servers by status", "Reboot groups", "Rollouts in progress", "Last change"]}
      >
        {rows.map((r) => (
          <FleetRow r={r} />
        ))}
      </Table>
      <Pager base="/console/fleets" params={{ cursor }} next={list.next_cursor} />
      <p class="muted small" id="fleets-at">
        Read <Ago at={new Date().toISOString()} />; this page does not update by itself (each fleet's overview does).
        Counts come from the fleet-wide index. The last change is the newest fleet-level audit entry (settings,
        channels, roles, reboot groups) or rollout step.
      </p>
    </>,
  );
}
