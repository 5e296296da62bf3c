/** @jsxImportSource hono/jsx */
/** Rollouts: the list, and one rollout with a bar per state, slow servers, failures, the event log; its controls. */
import { Hono } from "hono";
import { raw } from "hono/html";
import { renderLineChart, type ChartSeries } from "../../history/chart";
import { describeRolloutEvent } from "../rollout-events";
import { namedActor } from "../audit-text";
import { ROLLOUT_STATES, type RolloutTargetState } from "../../domain/enums";
import { EventSchema, RolloutListItem, RolloutSchema, TargetSchema } from "../../rollouts/schemas";
import { Channel } from "../../intent/schemas";
import type { StrategyStep } from "../../model/strategy";
import { must, qs, read, readPage, type InProcessApp } from "../api";
import { action, NoFleet, page, render, type View } from "../context";
import { requireCsrf, requireSession, type ConsoleEnv } from "../guard";
import {
  ActionForm,
  Ago,
  Badge,
  BlockedList,
  canWrite,
  Duration,
  Field,
  Filters,
  naturally,
  Pager,
  Select,
  serverHref,
  Table,
} from "../ui";
import { Progress } from "./overview";

const TARGET_STATES: [RolloutTargetState, string][] = [
  ["done", "ok"],
  ["applying", ""],
  ["queued", ""],
  ["waiting_budget", "warn"],
  ["failed", "bad"],
  ["timed_out", "bad"],
  ["skipped", "warn"],
];
const total = (counts: Record<string, number>) => Object.values(counts).reduce((a, b) => a + b, 0);

async function rolloutsPage(v: View) {
  if (!v.fleet) return render(v, "rollouts", "Rollouts", <NoFleet session={v.session} />);
  const q = v.c.req.query();
  const params = { fleet: v.fleet, state: q.state, agent: q.agent?.trim(), cursor: q.cursor };
  const [list, channels] = await Promise.all([
    readPage(v, RolloutListItem, `/v1/rollouts${qs({ ...params, limit: 50 })}`),
    readPage(v, Channel, `/v1/fleets/${encodeURIComponent(v.fleet)}/channels?limit=200`),
  ]);
  const defaults = channels.items.filter((c) => c.rollout);
  return render(
    v,
    "rollouts",
    "Rollouts",
    <>
      <h1>Rollouts</h1>
      <Filters action="/console/rollouts" label="Filter rollouts" fleet={v.fleet}>
        <Select name="state" label="State" options={ROLLOUT_STATES} value={q.state} />
        <Field label="Agent" name="agent" value={params.agent} />
      </Filters>
      <Table id="rollouts" caption="Rollouts" head={["Agent and image", "State", "Progress", "Started", "By"]}>
        {list.items.map((r) => {
          const n = total(r.counts);
          return (
            <tr>
              <td>
                <a href={`/console/rollouts/${r.id}?fleet=${encodeURIComponent(r.fleet)}`}>
                  {r.agent} → <span class="mono">{r.image}</span>
                </a>
              </td>
              <td>
                <Badge status={r.state} />
              </td>
              <td>
                <progress
                  value={r.counts.done ?? 0}
                  max={Math.max(n, 1)}
                  aria-label={`${r.counts.done ?? 0} of ${n} done`}
                  class="p-ok"
                />{" "}
                {r.counts.done ?? 0}/{n}
              </td>
              <td>
                <Ago at={r.created_at} />
              </td>
              <td>{namedActor(r.created_by, r.created_by_name)}</td>
            </tr>
          );
        })}
      </Table>
      {list.items.length === 0 ? <p>No rollout{q.state || q.agent ? " matches" : " yet"}.</p> : null}
      <Pager base="/console/rollouts" params={params} next={list.next_cursor} />
      <section aria-labelledby="h-defaults" id="rollout-defaults">
        <h2 id="h-defaults">Default strategies</h2>
        {defaults.length === 0 ? (
          <p class="muted">
            No agent has a default strategy: a rollout started without one is one wave. A fleet spec sets one per agent
            (channels.&lt;agent&gt;.rollout).
          </p>
        ) : (
          <Table
            caption="What a rollout of each agent follows when it is started without a strategy"
            head={["Agent", "Steps", "Automatic rollback"]}
          >
            {defaults.map((c) => (
              <tr>
                <td>{c.agent}</td>
                <td>{c.rollout!.strategy.steps.map(stepText).join(" → ")}</td>
                <td>{c.rollout!.strategy.auto_rollback ? "yes" : "no"}</td>
              </tr>
            ))}
          </Table>
        )}
      </section>
    </>,
  );
}

async function rolloutPage(v: View) {
  const id = v.c.req.param("id")!;
  const q = v.c.req.query();
  const [r, failed, timedOut, events, all, waiting] = await Promise.all([
    read(v, RolloutSchema, `/v1/rollouts/${id}`),
    readPage(v, TargetSchema, `/v1/rollouts/${id}/targets${qs({ state: "failed", limit: 50 })}`),
    readPage(v, TargetSchema, `/v1/rollouts/${id}/targets${qs({ state: "timed_out", limit: 50 })}`),
    readPage(v, EventSchema, `/v1/rollouts/${id}/events${qs({ limit: 100, cursor: q.cursor })}`),
    readPage(v, TargetSchema, `/v1/rollouts/${id}/targets${qs({ limit: 200, cursor: q.targets })}`),
    readPage(v, TargetSchema, `/v1/rollouts/${id}/targets${qs({ state: "waiting_budget", limit: 50 })}`),
  ]);
  v.fleet = r.fleet;
  const back = `/console/rollouts/${id}?fleet=${encodeURIComponent(r.fleet)}`;
  const csrf = v.session.csrf;
  const moving = r.state === "running" || r.state === "rolling_back" || r.state === "paused";
  const canRollBack =
    r.pass === 0 && (r.counts.done ?? 0) > 0 && r.state !== "rolling_back" && r.state !== "rolled_back";
  const failures = [...failed.items, ...timedOut.items];
  const control = (what: string, label: string, danger = false) => (
    <ActionForm
      action={`/console/rollouts/${id}/${what}?fleet=${encodeURIComponent(r.fleet)}`}
      csrf={csrf}
      back={back}
      label={label}
    >
      {danger ? (
        <label class="check">
          <input type="checkbox" name="confirm" value="yes" required /> I mean it
        </label>
      ) : null}
      <button type="submit" class={danger ? "danger" : undefined}>
        {label}
      </button>
    </ActionForm>
  );
  return render(
    v,
    "rollouts",
    `Rollout of ${r.agent}`,
    <>
      <h1>
        Rollout of {r.agent} → <span class="mono">{r.image}</span> <Badge status={r.state} />
      </h1>
      <div id="rollout-progress" data-live="">
        <div class="grid">
          <section class="card" aria-labelledby="h-progress">
            <h2 id="h-progress">Progress{r.pass === 1 ? " (rolling back)" : ""}</h2>
            <div class="bars">
              {TARGET_STATES.map(([s, tone]) => (
                <Progress label={s.replace("_", " ")} value={r.counts[s] ?? 0} max={r.total} tone={tone || undefined} />
              ))}
            </div>
          </section>
          <section class="card" aria-labelledby="h-about">
            <h2 id="h-about">About</h2>
            <dl class="kv">
              <dt>Version</dt>
              <dd class="mono">{r.version}</dd>
              <dt>Started</dt>
              <dd>
                <Ago at={r.created_at} /> by {namedActor(r.created_by, r.created_by_name)}
              </dd>
              <dt>Ended</dt>
              <dd>
                <Ago at={r.ended_at} never="not yet" />
              </dd>
              <dt>Strategy</dt>
              <dd>{strategySourceText(r)}</dd>
              <dt>Concurrency</dt>
              <dd>
                {r.concurrency}
                {r.reboot_slot ? ", takes a reboot slot" : ""}
              </dd>
              <dt>Median</dt>
              <dd>
                {r.median_s === null ? "—" : <Duration seconds={r.median_s} />}
                {/* An ended rollout has nothing to go (the API says 0), and an ETA under a second says nothing. */}
                {r.eta_s !== null && !r.ended_at && r.eta_s > 0 ? (
                  <>
                    , about <Duration seconds={r.eta_s} /> to go
                  </>
                ) : null}
              </dd>
              {r.reason ? (
                <>
                  <dt>Reason</dt>
                  <dd>{r.reason}</dd>
                </>
              ) : null}
            </dl>
          </section>
        </div>
        {r.blocked_by.length ? (
          <section class="card" aria-labelledby="h-waits" id="rollout-waits">
            <h2 id="h-waits">Why it waits</h2>
            <ul>
              {r.blocked_by.map((b) => (
                <li>
                  <Badge status={b.kind} /> {b.message}
                  {b.until ? (
                    <>
                      {" "}
                      (until <time datetime={b.until}>{b.until.replace("T", " ").slice(0, 16)} UTC</time>)
                    </>
                  ) : null}
                </li>
              ))}
            </ul>
          </section>
        ) : null}
        {r.steps.length ? <Plan r={r} /> : null}
        <h2>Slow servers</h2>
        {r.warnings.length === 0 ? (
          <p class="muted">None.</p>
        ) : (
          <ul>
            {r.warnings.map((w) => (
              <li>
                <Badge status="slow" />{" "}
                <a href={serverHref({ id: w.server_id, hostname: w.hostname, fleet: r.fleet })}>{w.hostname}</a>:{" "}
                {w.message} (
                <Ago at={w.at} />)
              </li>
            ))}
          </ul>
        )}
        <h2>Waiting</h2>
        {waiting.items.length === 0 ? (
          <p class="muted">No target waits for the disruption budget.</p>
        ) : (
          <Table caption="Targets waiting for the disruption budget" head={["Server", "Why it waits"]}>
            {waiting.items.map((t) => (
              <tr>
                <td>
                  <a href={serverHref({ id: t.server_id, hostname: t.hostname, fleet: r.fleet })}>{t.hostname}</a>{" "}
                  <Badge status={t.state} />
                </td>
                <td>
                  <BlockedList items={t.blocked_by} label={`Why ${t.hostname} waits`} />
                </td>
              </tr>
            ))}
          </Table>
        )}
        <h2>Failures</h2>
        {failures.length === 0 ? (
          <p class="muted">No target failed.</p>
        ) : (
          <Table caption="Failed targets" head={["Server", "State", "Why", "Ended"]}>
            {naturally(failures, (t) => t.hostname).map((t) => (
              <tr>
                <td>
                  <a href={serverHref({ id: t.server_id, hostname: t.hostname, fleet: r.fleet })}>{t.hostname}</a>
                </td>
                <td>
                  <Badge status={t.state} />
                </td>
                <td>{t.reason ?? "—"}</td>
                <td>
                  <Ago at={t.ended_at} />
                </td>
              </tr>
            ))}
          </Table>
        )}
      </div>
      {canWrite(v.session) && (moving || canRollBack) ? (
        <>
          <h2>Actions</h2>
          <div class="actions">
            {r.state === "paused" ? control("resume", "Resume") : moving ? control("pause", "Pause") : null}
            {moving ? control("cancel", "Cancel", true) : null}
            {canRollBack ? control("rollback", "Roll back", true) : null}
          </div>
        </>
      ) : null}
      <h2>Targets</h2>
      <Table
        id="rollout-targets"
        caption={`Targets${r.pass === 1 ? " of the rollback pass" : ""}`}
        head={["Server", "State", "Image", "Started", "Why"]}
      >
        {all.items.map((t) => (
          <tr>
            <td>
              <a href={`/console/servers/${t.server_id}`}>{t.hostname}</a>
            </td>
            <td>
              <Badge status={t.state} />
            </td>
            <td class="mono">{t.version}</td>
            <td>
              <Ago at={t.started_at} never="—" />
            </td>
            <td>{t.reason ?? (t.via_channel ? "took the rollout's image from the channel" : "")}</td>
          </tr>
        ))}
      </Table>
      {all.next_cursor ? (
        <nav class="pager" aria-label="Target pages">
          {q.targets ? <a href={`/console/rollouts/${id}${qs({ fleet: r.fleet })}`}>« First targets</a> : null}
          <a href={`/console/rollouts/${id}${qs({ fleet: r.fleet, targets: all.next_cursor })}`} rel="next">
            More targets »
          </a>
        </nav>
      ) : null}
      <h2>Event log</h2>
      <Table id="rollout-events" caption="Event log" head={["When", "What happened", "Server"]}>
        {events.items.map((e) => (
          <tr>
            <td>
              <Ago at={e.at} />
            </td>
            <td>{describeRolloutEvent(e.kind, e.details, e.hostname)}</td>
            <td>{e.server_id && e.hostname ? <a href={`/console/servers/${e.server_id}`}>{e.hostname}</a> : "—"}</td>
          </tr>
        ))}
      </Table>
      <Pager base={`/console/rollouts/${id}`} params={{ fleet: r.fleet, cursor: q.cursor }} next={events.next_cursor} />
    </>,
  );
}

type RolloutView = typeof RolloutSchema._output;

/** Whose strategy a rollout follows, in words. */
const strategySourceText = (r: RolloutView) =>
  r.strategy_source === "fleet_default"
    ? `the fleet's default for ${r.agent} (its spec's channels.${r.agent}.rollout)`
    : r.strategy_source === "request"
      ? "given when it was started"
      : "none: one wave";

/** A strategy step in a few words: "canary 2", "analysis 5m", "wave 50 % by zone". */
function stepText(s: StrategyStep): string {
  const size = (x: { count?: number; percent?: number }) => (x.count !== undefined ? `${x.count}` : `${x.percent} %`);
  if (s.type === "canary") return `canary ${size(s)}`;
  if (s.type === "pause") return s.duration_s ? `pause ${s.duration_s} s` : "pause until resumed";
  if (s.type === "analysis") return `analysis ${s.bake_s} s (${s.checks.map((c) => c.kind).join(", ")})`;
  const how = s.ramp ? `ramp ${s.ramp.start}×${s.ramp.factor}` : size(s);
  return `wave ${how}${s.by ? ` by ${s.by}` : ""}`;
}

const clock = (ms: number) => new Date(ms).toISOString().slice(11, 19);
const sampleValue = (n: number) => (Number.isInteger(n) ? String(n) : n.toFixed(2));

/** The strategy's plan: each step with its state and servers, and the analysis values over time. */
function Plan({ r }: { r: RolloutView }) {
  const names = [...new Set(r.analysis.map((a) => a.name))];
  const series: ChartSeries[] = names.map((name) => {
    const points = r.analysis.filter((a) => a.name === name);
    return {
      name,
      threshold: points.at(-1)?.threshold ?? null,
      points: points.map((a) => ({ x: Date.parse(a.at), y: a.value, bad: !a.ok })),
    };
  });
  return (
    <section aria-labelledby="h-plan" id="rollout-plan">
      <h2 id="h-plan">Plan</h2>
      <Table caption="Steps of the strategy" head={["#", "Step", "State", "Servers"]}>
        {r.steps.map((s) => (
          <tr class={s.phase === r.current_phase ? "current" : undefined}>
            <td>{s.step}</td>
            <td>{s.title}</td>
            <td>
              <Badge status={s.state} />
            </td>
            <td>
              {s.kind === "release"
                ? s.servers.join(", ") + (s.size > s.servers.length ? ` and ${s.size - s.servers.length} more` : "")
                : s.until
                  ? `until ${s.until.replace("T", " ").slice(0, 19)} UTC`
                  : "—"}
            </td>
          </tr>
        ))}
      </Table>
      {names.length ? (
        <figure id="rollout-analysis">
          {raw(
            renderLineChart(series, {
              id: "analysis-chart",
              title: `Analysis of the rollout of ${r.agent}`,
              xLabel: "time (UTC)",
              yLabel: "value",
              formatX: clock,
              formatY: sampleValue,
              dots: true,
            }),
          )}
          <figcaption>
            Analysis samples: {r.analysis.length} value(s) of {names.length} check(s); the latest:{" "}
            {names
              .map((n) => r.analysis.filter((a) => a.name === n).at(-1)!)
              .map((a) => `${a.name}: ${a.detail}`)
              .join("; ")}
          </figcaption>
        </figure>
      ) : null}
    </section>
  );
}

export function rolloutPages(getApp: () => InProcessApp) {
  const control = (what: "pause" | "resume" | "cancel" | "rollback", done: string) =>
    action(getApp, "/console/rollouts", async (v) => {
      await must(v.api("POST", `/v1/rollouts/${v.c.req.param("id")}/${what}`));
      return done;
    });
  const id = ":id{[0-9a-f-]{36}}";
  return new Hono<ConsoleEnv>()
    .get("/console/rollouts", requireSession, page(getApp, "rollouts", rolloutsPage))
    .get(`/console/rollouts/${id}`, requireSession, page(getApp, "rollouts", rolloutPage))
    .post(
      `/console/rollouts/${id}/pause`,
      requireCsrf,
      control("pause", "the rollout is paused: no new target starts."),
    )
    .post(`/console/rollouts/${id}/resume`, requireCsrf, control("resume", "the rollout is running again."))
    .post(
      `/console/rollouts/${id}/cancel`,
      requireCsrf,
      control("cancel", "the rollout is cancelled: queued targets are skipped."),
    )
    .post(`/console/rollouts/${id}/rollback`, requireCsrf, control("rollback", "the rollout is rolling back."));
}
