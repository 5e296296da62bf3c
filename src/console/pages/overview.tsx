/** @jsxImportSource hono/jsx */
/** Overview: one fleet at a glance, from GET /v1/fleets/{fleet}/summary (one request). */
import { must, qs, read, readPage } from "../api";
import { NoFleet, render, staleAfterOf, type View } from "../context";
import type { FleetSummary } from "../../status/schemas";
import { ServerSummary } from "../../servers/schemas";
import { Ago, Badge, ExactTime, LastReport, naturally, serverHref, Table } from "../ui";
import { ledgerViews } from "./servers";
import { actorNames, actorText } from "../audit-text";
import { FleetHistory } from "../../history/schemas";
import { historyPath, HistoryCard } from "./history";

/** How many servers of each troubled status the overview names before linking to the rest. */
const NAMED = 5;
const NAMED_FROM = 50;
const TROUBLE: [status: "failed" | "stale" | "drifted", title: string][] = [
  ["failed", "Failed"],
  ["stale", "Stale"],
  ["drifted", "Drifting"],
];

/** The overview's rows: status words from the index, decommissioning from the lifecycle state. */
const SERVER_ROWS: [key: string, label: string, from: "status" | "state"][] = [
  ["realized", "realized", "status"],
  ["pending", "converging (pending)", "status"],
  ["failed", "failed", "status"],
  ["drifted", "drifted", "status"],
  ["stale", "stale", "status"],
  ["unknown", "never reported", "status"],
  ["decommissioning", "decommissioning", "state"],
];

export const Progress = ({ label, value, max, tone }: { label: string; value: number; max: number; tone?: string }) => (
  <>
    <span>{label}</span>
    <progress
      value={value}
      max={Math.max(max, 1)}
      class={tone ? `p-${tone}` : undefined}
      aria-label={`${label}: ${value} of ${max}`}
    >
      {value}/{max}
    </progress>
    <span class="mono">
      {value}/{max}
    </span>
  </>
);

export async function overviewPage(v: View) {
  // Several fleets and none asked for: the all-fleets page, not whichever sorts first.
  if (!v.c.req.query("fleet") && v.fleets.length > 1) return v.c.redirect("/console/fleets", 303);
  if (!v.fleet) return render(v, "overview", "Overview", <NoFleet session={v.session} />);
  const f = encodeURIComponent(v.fleet);
  const [s, history, ...named] = await Promise.all([
    must<FleetSummary>(v.api("GET", `/v1/fleets/${f}/summary`)),
    read(v, FleetHistory, historyPath(v.fleet, { metric: "servers,versions", since: "24h" })),
    // servers_fleet_status_sort_idx answers each with NAMED_FROM rows at most.
    ...TROUBLE.map(([status]) =>
      readPage(v, ServerSummary, `/v1/servers${qs({ fleet: v.fleet, status, limit: NAMED_FROM })}`),
    ),
  ]);
  // The index answers in text order (sim-10 before sim-2): the first few by natural order come
  // from a larger page, exact while the fleet has at most NAMED_FROM servers of the status.
  const firstOf = named.map((p) => naturally(p.items, (x) => x.hostname).slice(0, NAMED));
  const staleAfter = staleAfterOf(v, v.fleet);
  // Who started each rollout, by name (a token's name for an admin session).
  const names = await actorNames(
    v,
    s.rollouts.map((r) => ({ actor: r.created_by, target: "", hostname: null })),
  );
  const ledgers = await ledgerViews(
    v,
    firstOf.flatMap((rows) => rows.map((x) => x.id)),
  );
  const serversOf = (key: string, from: "status" | "state") => `/console/servers?fleet=${f}&${from}=${key}`;
  const drift = s.servers.by_status.drifted + s.servers.by_status.failed;
  return render(
    v,
    "overview",
    `Overview of ${v.fleet}`,
    <>
      <h1>
        Fleet <span class="mono">{v.fleet}</span>
      </h1>
      <p class="small">
        <a href={`/console/enrollment?fleet=${f}`}>Enrollment tokens</a>: let machines join this fleet by themselves
      </p>
      <div class="grid" id="overview-cards" data-live="">
        <section class="card" aria-labelledby="h-servers">
          <h2 id="h-servers">Servers ({s.servers.total})</h2>
          <ul class="counts">
            {SERVER_ROWS.map(([key, label, from]) => (
              <li>
                <a href={serversOf(key, from)}>
                  <Badge status={key} label={label} />
                </a>
                <span class="n" data-count={key}>
                  {from === "status"
                    ? s.servers.by_status[key as keyof typeof s.servers.by_status]
                    : s.servers.by_state[key as keyof typeof s.servers.by_state]}
                </span>
              </li>
            ))}
          </ul>
        </section>
        <section class="card" aria-labelledby="h-drift">
          <h2 id="h-drift">Drift</h2>
          <p>
            <span class="n" data-count="drift">
              {drift}
            </span>{" "}
            server{drift === 1 ? "" : "s"} whose agents differ from what they should run or failed to get there.
          </p>
          <p>
            <a href={`/console/drift?fleet=${f}`}>See the findings and fix them</a>
          </p>
        </section>
        <section class="card" aria-labelledby="h-data">
          <h2 id="h-data">Data version</h2>
          <p>
            Version <strong>{s.data.version}</strong> of {s.data.newest_version}{" "}
            {s.data.pending.length ? (
              <Badge status="pending" label={`${s.data.pending.length} step(s) pending`} />
            ) : (
              <Badge status="realized" label="current" />
            )}
          </p>
          {s.data.pending.length ? (
            <ul>
              {s.data.pending.map((p) => (
                <li>
                  {p.version}: {p.description}
                </li>
              ))}
            </ul>
          ) : null}
        </section>
      </div>
      <div class="grid" id="overview-named" data-live="">
        {TROUBLE.map(([status, title], i) => {
          const total = s.servers.by_status[status];
          if (total === 0) return null;
          const rows = firstOf[i];
          return (
            <section class="card" aria-labelledby={`h-named-${status}`} data-named={status}>
              <h2 id={`h-named-${status}`}>
                <Badge status={status} label={title} /> ({total})
              </h2>
              <ul class="plain">
                {rows.map((x) => (
                  <li>
                    <a href={serverHref(x)}>{x.hostname}</a>{" "}
                    <span class="muted small">
                      last report{" "}
                      {ledgers.get(x.id) ? (
                        <ExactTime at={ledgers.get(x.id)!.last_seen} />
                      ) : (
                        <LastReport at={x.last_seen} status={x.status} staleAfterS={staleAfter} />
                      )}
                    </span>
                  </li>
                ))}
              </ul>
              {total > rows.length ? (
                <p class="small">
                  <a href={serversOf(status, "status")}>
                    All {total} {status} servers
                  </a>
                </p>
              ) : null}
            </section>
          );
        })}
      </div>
      <HistoryCard h={history} fleet={v.fleet} />
      <h2>Reboot groups</h2>
      {s.reboot_groups.length === 0 ? (
        <p class="muted">No reboot group yet: the first FleetLock request of a group creates it.</p>
      ) : (
        <Table
          id="overview-groups"
          caption="Reboot groups"
          head={["Group", ["Slots held", "num"], ["Free", "num"], ["Queue", "num"], "Window", "State"]}
        >
          {s.reboot_groups.map((g) => (
            <tr>
              <td>
                <a href={`/console/groups/${encodeURIComponent(g.name)}?fleet=${f}`}>{g.name}</a>
              </td>
              <td class="num">
                {g.holders}/{g.slots}
              </td>
              <td class="num">{g.available_slots}</td>
              <td class="num">{g.queue_length}</td>
              <td>
                {g.has_windows ? (
                  <Badge status={g.open_now ? "open" : "closed"} label={g.open_now ? "window open" : "window closed"} />
                ) : (
                  <span class="muted">always open</span>
                )}
              </td>
              <td>
                {g.paused ? <Badge status="paused" /> : <Badge status="active" label="admitting" />}{" "}
                {g.stuck ? <Badge status="stuck" label={`${g.stuck} stuck`} /> : null}
              </td>
            </tr>
          ))}
        </Table>
      )}
      <h2>Rollouts in progress</h2>
      <div id="overview-rollouts" data-live="">
        {s.rollouts.length === 0 ? (
          <p class="muted">
            No rollout is moving. <a href={`/console/rollouts?fleet=${f}`}>All rollouts</a>
          </p>
        ) : (
          <div class="grid">
            {s.rollouts.map((r) => (
              <section class="card" aria-label={`Rollout of ${r.agent}`}>
                <h3>
                  <a href={`/console/rollouts/${r.id}?fleet=${f}`}>
                    {r.agent} → <span class="mono">{r.image}</span>
                  </a>
                </h3>
                <p>
                  <Badge status={r.state} /> started <Ago at={r.created_at} /> by {actorText(r.created_by, names)}
                </p>
                <div class="bars">
                  <Progress label="done" value={r.counts.done} max={r.total} tone="ok" />
                  <Progress label="failed" value={r.counts.failed + r.counts.timed_out} max={r.total} tone="bad" />
                </div>
              </section>
            ))}
          </div>
        )}
      </div>
      <p class="muted small" id="overview-at" data-live="">
        Counts as of <Ago at={s.at} />.
      </p>
    </>,
  );
}
