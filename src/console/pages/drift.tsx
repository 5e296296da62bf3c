/** @jsxImportSource hono/jsx */
/**
 * Drift: the check's findings with their reasons; a dry run of the fix, then the fix; and the
 * disruption budget's units drift fixes hold, with an operator's release of one.
 */
import { Hono } from "hono";
import { must, qs, read, send, type InProcessApp } from "../api";
import { CheckAnswer, FixAnswer } from "../../check/schemas";
import { FixHoldList } from "../../fleetlock/schemas";
import { action, confirmTyped, NoFleet, page, render, type View } from "../context";
import { requireCsrf, requireSession, type ConsoleEnv } from "../guard";
import {
  ActionForm,
  Ago,
  Badge,
  canWrite,
  DangerForm,
  Field,
  Filters,
  naturally,
  Pager,
  serverHref,
  Table,
} from "../ui";

const filterOf = (v: View, source: Record<string, string | undefined>) => ({
  fleet: v.fleet,
  agent: source.agent?.trim() || undefined,
  cursor: source.cursor || undefined,
});

const ServerLink = ({ id, hostname, fleet }: { id: string; hostname: string; fleet: string }) => (
  <a href={serverHref({ id, hostname, fleet })}>{hostname}</a>
);

async function driftPage(v: View) {
  if (!v.fleet) return render(v, "drift", "Drift", <NoFleet session={v.session} />);
  const f = filterOf(v, v.c.req.query());
  const out = await read(v, CheckAnswer, `/v1/check/server-agents${qs({ ...f, limit: 50 })}`);
  const holds = await read(v, FixHoldList, `/v1/fleets/${encodeURIComponent(v.fleet)}/fix-holds`);
  const fixable = out.findings.some((x) => x.fix !== "none");
  const write = canWrite(v.session);
  return render(
    v,
    "drift",
    "Drift",
    <>
      <h1>Drift</h1>
      <Filters action="/console/drift" label="Filter findings" fleet={v.fleet}>
        <Field label="Agent" name="agent" value={f.agent} />
      </Filters>
      <Table id="drift-findings" caption="Findings" head={["Server", "Agent", "Reason", "Desired", "Reported", "Fix"]}>
        {naturally(out.findings, (x) => x.hostname).map((x) => (
          <tr>
            <td>
              <ServerLink id={x.server} hostname={x.hostname} fleet={v.fleet!} />
            </td>
            <td>{x.agent ?? "—"}</td>
            <td>
              <Badge
                status={x.reason === "failed" ? "failed" : x.reason === "stale_report" ? "stale" : "drifted"}
                label={x.reason.replace(/_/g, " ")}
              />
              <div class="small muted">{x.advice}</div>
            </td>
            <td class="mono">{x.desired_image ?? "—"}</td>
            <td class="mono">{x.reported_image ?? "—"}</td>
            <td>{x.fix}</td>
          </tr>
        ))}
      </Table>
      {out.findings.length === 0 ? <p>No drift: every server checked runs what it should.</p> : null}
      {out.skipped.length ? (
        <>
          <h2>Skipped</h2>
          <ul>
            {naturally(out.skipped, (s) => s.hostname).map((s) => (
              <li>
                <ServerLink id={s.server} hostname={s.hostname} fleet={v.fleet!} />: {s.why}
              </li>
            ))}
          </ul>
        </>
      ) : null}
      <Pager
        base="/console/drift"
        params={{ fleet: v.fleet, agent: f.agent, cursor: f.cursor }}
        next={out.next_cursor}
      />
      <h2>Budget held by fixes</h2>
      <p class="small muted">
        A fix holds a unit of the fleet's disruption budget until its server reports every agent realized; one not
        realized 30 minutes after its write counts as a failed server until it reports healthy.
      </p>
      <Table
        id="fix-holds"
        caption="Budget held by fixes"
        head={["Server", "State", "Since", "Settles", ...(write ? ["Release"] : [])]}
      >
        {naturally(holds.items, (h) => h.server.hostname).map((h) => (
          <tr>
            <td>
              <ServerLink id={h.server.id} hostname={h.server.hostname ?? h.server.id} fleet={v.fleet!} />
            </td>
            <td>
              <Badge
                status={h.state === "writing" ? "running" : h.state === "written" ? "pending" : "failed"}
                label={h.state.replace(/_/g, " ")}
              />
              {h.written_generation !== null ? <div class="small muted">generation {h.written_generation}</div> : null}
            </td>
            <td>
              <Ago at={h.since} />
            </td>
            <td>{h.settles_at ? <Ago at={h.settles_at} /> : "when it reports healthy"}</td>
            {write ? (
              <td>
                {h.state === "writing" ? (
                  <span class="small muted">settles by itself</span>
                ) : (
                  <DangerForm
                    action={`/console/drift/fix-holds/release${qs({ fleet: v.fleet })}`}
                    csrf={v.session!.csrf}
                    back={`/console/drift${qs(f)}`}
                    label={`Release the unit held for ${h.server.hostname ?? h.server.id}`}
                    fields={{ server: h.server.id }}
                    typed={{ prompt: "Type the hostname to confirm", size: 16 }}
                    button="Release"
                  />
                )}
              </td>
            ) : null}
          </tr>
        ))}
      </Table>
      {holds.items.length === 0 ? <p class="muted">No fix holds a unit of the budget.</p> : null}
      {write && fixable ? (
        <div class="actions">
          <ActionForm
            action={`/console/drift/dry-run${qs({ fleet: v.fleet })}`}
            csrf={v.session.csrf}
            back={`/console/drift${qs(f)}`}
            label="Dry run"
          >
            <input type="hidden" name="agent" value={f.agent ?? ""} />
            <input type="hidden" name="cursor" value={f.cursor ?? ""} />
            <button type="submit">Dry-run the fix for this page</button>
          </ActionForm>
        </div>
      ) : null}
    </>,
  );
}

const body = (f: ReturnType<typeof filterOf>, dry: boolean) => ({
  fleet: f.fleet,
  agent: f.agent,
  cursor: f.cursor,
  dry_run: dry,
  limit: 50,
});

/** How many servers shown by name in the fix's message (a flash is short). */
const NOT_FIXED_NAMED = 5;

/**
 * The fix's outcome in one message: how many servers were fixed, and each one that was not with
 * its error code (`budget_exhausted`: the fleet's disruption budget is spent; `unavailable`: its
 * fleet's coordinator or its ledger did not answer), the first few by name.
 */
function fixedText(
  actions: readonly { hostname: string; result: { ok: true } | { ok: false; error: string } | null }[],
): string {
  const done = actions.filter((a) => a.result?.ok).length;
  const not = naturally(
    actions.filter((a) => a.result && !a.result.ok),
    (a) => a.hostname,
  );
  const head = `fix applied to ${actions.length} server(s): ${done} fixed`;
  if (not.length === 0) return `${head}.`;
  const named = not
    .slice(0, NOT_FIXED_NAMED)
    .map((a) => `${a.hostname} (${a.result && !a.result.ok ? a.result.error : ""})`);
  const more = not.length > NOT_FIXED_NAMED ? ` and ${not.length - NOT_FIXED_NAMED} more` : "";
  return `${head}, ${not.length} not fixed: ${named.join(", ")}${more}.`;
}

export function driftPages(getApp: () => InProcessApp) {
  return new Hono<ConsoleEnv>()
    .get("/console/drift", requireSession, page(getApp, "drift", driftPage))
    .post(
      "/console/drift/dry-run",
      requireCsrf,
      action(getApp, "/console/drift", async (v, form) => {
        const f = filterOf(v, form);
        const plan = await send(v, FixAnswer, "POST", "/v1/check/server-agents/fix", body(f, true));
        // The plan is this answer (nothing changed yet); the fix form under it carries the same filters.
        return render(
          v,
          "drift",
          "Drift fix: dry run",
          <>
            <h1>What the fix would do</h1>
            <p>Nothing has changed yet. Each server below gets the action shown when you apply the fix.</p>
            <Table id="drift-plan" caption="Planned fixes" head={["Server", "Action", "Reasons"]}>
              {naturally(plan.actions, (a) => a.hostname).map((a) => (
                <tr>
                  <td>
                    <ServerLink id={a.server} hostname={a.hostname} fleet={v.fleet!} />
                  </td>
                  <td>{a.action}</td>
                  <td>{a.reasons.join(", ")}</td>
                </tr>
              ))}
            </Table>
            <div class="actions">
              <ActionForm
                action={`/console/drift/fix${qs({ fleet: v.fleet })}`}
                csrf={v.session.csrf}
                back={`/console/drift${qs(f)}`}
                label="Apply the fix"
              >
                <input type="hidden" name="agent" value={f.agent ?? ""} />
                <input type="hidden" name="cursor" value={f.cursor ?? ""} />
                <button type="submit" class="primary">
                  Apply the fix
                </button>
              </ActionForm>
              <a class="button" href={`/console/drift${qs(f)}`}>
                Cancel
              </a>
            </div>
          </>,
        );
      }),
    )
    .post(
      "/console/drift/fix-holds/release",
      requireCsrf,
      action(getApp, "/console/drift", async (v, form) => {
        const server = form.server ?? "";
        const listed = await read(v, FixHoldList, `/v1/fleets/${encodeURIComponent(v.fleet!)}/fix-holds`);
        const hostname = listed.items.find((h) => h.server.id === server)?.server.hostname ?? server;
        confirmTyped(form, hostname, "the server's hostname");
        await must(
          v.api("DELETE", `/v1/fleets/${encodeURIComponent(v.fleet!)}/fix-holds/${encodeURIComponent(server)}`),
        );
        return `the budget unit held for ${hostname} was freed.`;
      }),
    )
    .post(
      "/console/drift/fix",
      requireCsrf,
      action(getApp, "/console/drift", async (v, form) => {
        const out = await send(v, FixAnswer, "POST", "/v1/check/server-agents/fix", body(filterOf(v, form), false));
        return fixedText(out.actions);
      }),
    );
}
