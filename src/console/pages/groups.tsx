/** @jsxImportSource hono/jsx */
/** Reboot groups: holders, the queue in order, windows in the group's time zone; pause, resize, force-release. */
import { Hono } from "hono";
import type { z } from "zod";
import { GroupSchema } from "../../fleetlock/schemas";
import { must, read, send, type InProcessApp } from "../api";
import { action, confirmTyped, NoFleet, page, render, type View } from "../context";
import { requireCsrf, requireSession, type ConsoleEnv } from "../guard";
import {
  ActionForm,
  Ago,
  Badge,
  BlockedList,
  canWrite,
  DangerForm,
  Duration,
  Field,
  Filters,
  serverHref,
  Table,
} from "../ui";

type Group = z.output<typeof GroupSchema>;

const groupPath = (fleet: string, group: string) =>
  `/v1/fleets/${encodeURIComponent(fleet)}/reboot-groups/${encodeURIComponent(group)}`;

/** "Sat 14:05" in the group's time zone, so a window reads as the people who set it meant it. */
function nowIn(timeZone: string) {
  try {
    return new Intl.DateTimeFormat("en-GB", { timeZone, weekday: "short", hour: "2-digit", minute: "2-digit" }).format(
      new Date(),
    );
  } catch {
    return "?";
  }
}

const Windows = ({ windows }: { windows: Group["windows"] }) =>
  windows.length === 0 ? (
    <span class="muted">none: slots are granted at any time</span>
  ) : (
    <ul>
      {windows.map((w) => (
        <li>
          {w.days.join(", ")} from {w.start_time} for <Duration seconds={w.length_minutes * 60} /> ({w.time_zone}; now{" "}
          {nowIn(w.time_zone)} there)
        </li>
      ))}
    </ul>
  );

async function groupsPage(v: View) {
  if (!v.fleet) return render(v, "groups", "Reboot groups", <NoFleet session={v.session} />);
  const list = await must(
    v.api<{ fleet: string; lock_ttl_s: number; items: Group[] }>(
      "GET",
      `/v1/fleets/${encodeURIComponent(v.fleet)}/reboot-groups`,
    ),
  );
  const q = (v.c.req.query("q") ?? "").trim().toLowerCase();
  const items = list.items.filter((g) => !q || g.name.toLowerCase().includes(q));
  return render(
    v,
    "groups",
    "Reboot groups",
    <>
      <h1>Reboot groups</h1>
      <Filters action="/console/groups" label="Filter groups" fleet={v.fleet}>
        <Field label="Name contains" name="q" value={q} />
      </Filters>
      <p class="muted small">
        A holder is stuck once it has held its slot longer than the fleet's lock TTL ({list.lock_ttl_s} s).
      </p>
      <Table
        id="groups"
        caption="Reboot groups"
        head={["Group", ["Held", "num"], ["Queue", "num"], "Windows", "State"]}
      >
        {items.map((g) => (
          <tr>
            <td>
              <a href={`/console/groups/${encodeURIComponent(g.name)}?fleet=${encodeURIComponent(v.fleet!)}`}>
                {g.name}
              </a>
            </td>
            <td class="num">
              {g.holders.length}/{g.slots}
            </td>
            <td class="num">{g.queue.length}</td>
            <td>
              {g.windows.length ? (
                <Badge status={g.open_now ? "open" : "closed"} label={g.open_now ? "window open" : "window closed"} />
              ) : (
                <span class="muted">always</span>
              )}
            </td>
            <td>
              {g.paused ? <Badge status="paused" /> : <Badge status="active" label="admitting" />}{" "}
              {g.holders.some((h) => h.stuck) ? <Badge status="stuck" /> : null}
            </td>
          </tr>
        ))}
      </Table>
      {items.length === 0 ? <p>No group{q ? " matches" : " yet"}.</p> : null}
    </>,
  );
}

async function groupPage(v: View) {
  if (!v.fleet) return render(v, "groups", "Reboot group", <NoFleet session={v.session} />);
  const name = v.c.req.param("group")!;
  const g = await read(v, GroupSchema, groupPath(v.fleet, name));
  const back = `/console/groups/${encodeURIComponent(name)}?fleet=${encodeURIComponent(v.fleet)}`;
  const act = (what: string) =>
    `/console/groups/${encodeURIComponent(name)}/${what}?fleet=${encodeURIComponent(v.fleet!)}`;
  const csrf = v.session.csrf;
  const write = canWrite(v.session);
  const serverLink = (s: Group["holders"][number]["server"]) =>
    s ? (
      <a href={serverHref({ id: s.id, hostname: s.hostname, fleet: v.fleet })}>{s.hostname ?? s.id}</a>
    ) : (
      <span class="muted">unknown id</span>
    );
  return render(
    v,
    "groups",
    `Reboot group ${name}`,
    <>
      <h1>
        Reboot group <span class="mono">{name}</span>{" "}
        {g.paused ? <Badge status="paused" /> : <Badge status="active" label="admitting" />}
      </h1>
      <div id="group-detail" data-live="">
        {g.blocked_by.length ? (
          <section class="card notice" aria-labelledby="h-blocked">
            <h2 id="h-blocked">Why it admits no one</h2>
            <BlockedList items={g.blocked_by} label="Why the group admits no one" />
          </section>
        ) : null}
        <div class="grid">
          <section class="card" aria-labelledby="h-slots">
            <h2 id="h-slots">Slots</h2>
            <dl class="kv">
              <dt>Held</dt>
              <dd>
                {g.holders.length} of {g.slots} ({g.available_slots} free now)
              </dd>
              <dt>Queue wait</dt>
              <dd>
                <Duration seconds={g.queue_wait_s} /> at most
              </dd>
              <dt>Window</dt>
              <dd>
                {g.windows.length ? (
                  <Badge status={g.open_now ? "open" : "closed"} label={g.open_now ? "open now" : "closed now"} />
                ) : (
                  "always open"
                )}
              </dd>
              <dt>Changed</dt>
              <dd>
                <Ago at={g.updated_at} />
              </dd>
            </dl>
          </section>
          <section class="card" aria-labelledby="h-windows">
            <h2 id="h-windows">Maintenance windows</h2>
            <Windows windows={g.windows} />
          </section>
        </div>
        <h2>Holders</h2>
        <Table
          caption="Holders"
          head={["FleetLock id", "Server", "Since", "State", ...(write ? ["Force release"] : [])]}
        >
          {g.holders.map((h) => (
            <tr>
              <td class="mono">{h.id}</td>
              <td>{serverLink(h.server)}</td>
              <td>
                <Ago at={h.granted_at} /> (<Duration seconds={h.held_for_s} />)
              </td>
              <td>{h.stuck ? <Badge status="stuck" /> : <Badge status="running" label="holding" />}</td>
              {write ? (
                <td>
                  <DangerForm
                    action={act("release")}
                    csrf={csrf}
                    back={back}
                    label={`Force-release ${h.id}`}
                    fields={{ holder: h.id }}
                    typed={{ prompt: "Type the id to confirm", size: 12 }}
                    button="Release"
                  />
                </td>
              ) : null}
            </tr>
          ))}
        </Table>
        {g.holders.length === 0 ? <p class="muted">Nobody holds a slot.</p> : null}
        <h2>Queue, in order</h2>
        {g.queue.length === 0 ? (
          <p class="muted">Nobody is waiting.</p>
        ) : (
          <ol class="queue" aria-label="Queue">
            {g.queue.map((w) => (
              <li>
                <span class="mono">{w.id}</span> ({serverLink(w.server)}) waiting <Duration seconds={w.waited_s} />,
                refused <Ago at={w.deadline} /> unless granted{" "}
                {w.connected ? (
                  <Badge status="connected" />
                ) : (
                  <Badge status="waiting" label="request gone, keeps its place" />
                )}
                <BlockedList items={w.blocked_by} label={`Why ${w.server?.hostname ?? w.id} waits`} />
              </li>
            ))}
          </ol>
        )}
      </div>
      {write ? (
        <>
          <h2>Actions</h2>
          <div class="actions">
            <ActionForm
              action={act(g.paused ? "resume" : "pause")}
              csrf={csrf}
              back={back}
              label={g.paused ? "Resume" : "Pause"}
            >
              <button type="submit">{g.paused ? "Resume: admit again" : "Pause: admit no one new"}</button>
            </ActionForm>
            <ActionForm action={act("resize")} csrf={csrf} back={back} label="Resize">
              <label>
                Slots
                <input name="slots" type="number" min={0} max={1000} required value={String(g.slots)} />
              </label>
              <button type="submit">Resize</button>
            </ActionForm>
          </div>
        </>
      ) : null}
    </>,
  );
}

export function groupPages(getApp: () => InProcessApp) {
  const fallback = "/console/groups";
  const put = async (v: View, change: (g: Group) => Record<string, unknown>) => {
    const path = groupPath(v.fleet!, v.c.req.param("group")!);
    const g = await read(v, GroupSchema, path);
    return send(v, GroupSchema, "PUT", path, { slots: g.slots, ...change(g) });
  };
  return new Hono<ConsoleEnv>()
    .get("/console/groups", requireSession, page(getApp, "groups", groupsPage))
    .get("/console/groups/:group", requireSession, page(getApp, "groups", groupPage))
    .post(
      "/console/groups/:group/pause",
      requireCsrf,
      action(getApp, fallback, async (v) => (await put(v, () => ({ paused: true })), "the group admits no one new.")),
    )
    .post(
      "/console/groups/:group/resume",
      requireCsrf,
      action(getApp, fallback, async (v) => (await put(v, () => ({ paused: false })), "the group admits again.")),
    )
    .post(
      "/console/groups/:group/resize",
      requireCsrf,
      action(getApp, fallback, async (v, form) => {
        const slots = Number(form.slots);
        const g = await put(v, () => ({ slots: Number.isInteger(slots) ? slots : -1 }));
        return `the group has ${g.slots} slot(s); holders keep theirs.`;
      }),
    )
    .post(
      "/console/groups/:group/release",
      requireCsrf,
      action(getApp, fallback, async (v, form) => {
        const holder = form.holder ?? "";
        confirmTyped(form, holder, "the holder's id");
        await must(
          v.api("DELETE", `${groupPath(v.fleet!, v.c.req.param("group")!)}/holders/${encodeURIComponent(holder)}`),
        );
        return `${holder}'s slot was released.`;
      }),
    );
}
