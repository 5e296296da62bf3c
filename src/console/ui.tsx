/** @jsxImportSource hono/jsx */
/** The console's shared pieces: the page frame, status badges, times, pagers, forms. */
import { raw } from "hono/html";
import type { Child } from "hono/jsx";
import { ASSETS } from "./assets";
import type { Session } from "./session";

/** Every status word with its icon and tone: never colour alone. */
const TONES: Record<string, [icon: string, tone: string]> = {
  realized: ["✓", "ok"],
  succeeded: ["✓", "ok"],
  done: ["✓", "ok"],
  active: ["●", "ok"],
  open: ["◯", "ok"],
  connected: ["●", "ok"],
  pending: ["◔", "info"],
  applying: ["◔", "info"],
  running: ["▶", "info"],
  provisioning: ["◌", "info"],
  queued: ["…", "idle"],
  failed: ["✕", "bad"],
  removal_failed: ["✕", "bad"],
  stuck: ["⚠", "bad"],
  timed_out: ["◷", "bad"],
  drifted: ["≠", "warn"],
  stale: ["◷", "warn"],
  unknown: ["?", "idle"],
  paused: ["⏸", "warn"],
  closed: ["■", "idle"],
  decommissioning: ["⏏", "warn"],
  removal_pending: ["⏏", "warn"],
  removed: ["∅", "idle"],
  cancelled: ["⊘", "idle"],
  skipped: ["↷", "idle"],
  rolling_back: ["↶", "warn"],
  rolled_back: ["↶", "idle"],
  slow: ["◴", "warn"],
  waiting: ["…", "idle"],
  waiting_budget: ["…", "warn"],
};

export const Badge = ({ status, label }: { status: string; label?: string }) => {
  const [icon, tone] = TONES[status] ?? ["•", "idle"];
  return (
    <span class={`badge t-${tone}`} data-status={status}>
      <span class="i" aria-hidden="true">
        {icon}
      </span>
      {label ?? status.replace(/_/g, " ")}
    </span>
  );
};

const UNITS: [string, number][] = [
  ["y", 31536000],
  ["mo", 2592000],
  ["d", 86400],
  ["h", 3600],
  ["m", 60],
  ["s", 1],
];

function relative(ms: number, now = Date.now()) {
  const s = Math.round((now - ms) / 1000);
  const abs = Math.abs(s);
  if (abs < 5) return "just now";
  const [u, n] = UNITS.find(([, n]) => abs >= n)!;
  const v = Math.floor(abs / n);
  return s >= 0 ? `${v}${u} ago` : `in ${v}${u}`;
}

const absolute = (ms: number) =>
  new Date(ms)
    .toISOString()
    .replace("T", " ")
    .replace(/\.\d+Z$/, " UTC");

/** "3m ago", with the absolute time on hover (title) and for machines (datetime). */
export const Ago = ({ at, never = "never" }: { at: string | null | undefined; never?: string }) => {
  if (!at) return <span class="muted">{never}</span>;
  const ms = Date.parse(at);
  return (
    <time datetime={new Date(ms).toISOString()} title={absolute(ms)} data-rel="">
      {relative(ms)}
    </time>
  );
};

export const Duration = ({ seconds }: { seconds: number }) => {
  const s = Math.max(0, Math.round(seconds));
  const text =
    s >= 3600
      ? `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`
      : s >= 60
        ? `${Math.floor(s / 60)}m ${s % 60}s`
        : `${s}s`;
  return <span title={`${s} seconds`}>{text}</span>;
};

/** A paged list's "next" link (and a way back to the first page). */
export const Pager = ({
  base,
  params,
  next,
}: {
  base: string;
  params: Record<string, string | undefined>;
  next: string | null;
}) => {
  const link = (cursor?: string) => {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries({ ...params, cursor })) if (v) q.set(k, v);
    return `${base}?${q}`;
  };
  if (!next && !params.cursor) return null;
  return (
    <nav class="pager" aria-label="Pages">
      {params.cursor ? <a href={link()}>« First page</a> : null}
      {next ? (
        <a href={link(next)} rel="next">
          Next page »
        </a>
      ) : (
        <span class="muted">Last page</span>
      )}
    </nav>
  );
};

/** A state-changing form: POST with the CSRF token, sent by fetch when the client module is there. */
export const ActionForm = (props: { action: string; csrf: string; back: string; children: Child; label?: string }) => (
  <form method="post" action={props.action} data-enhance="" aria-label={props.label}>
    <input type="hidden" name="_csrf" value={props.csrf} />
    <input type="hidden" name="back" value={props.back} />
    {props.children}
  </form>
);

const Flash = ({ flash }: { flash: { ok: boolean; text: string } | null }) =>
  flash ? (
    <div class={`flash ${flash.ok ? "ok" : "bad"}`} role={flash.ok ? "status" : "alert"}>
      <strong>{flash.ok ? "✓ Done: " : "✕ Failed: "}</strong>
      {flash.text}
    </div>
  ) : null;

const NAV = [
  ["overview", "Overview", "/console"],
  ["servers", "Servers", "/console/servers"],
  ["groups", "Reboot groups", "/console/groups"],
  ["rollouts", "Rollouts", "/console/rollouts"],
  ["drift", "Drift", "/console/drift"],
  ["images", "Images", "/console/images"],
  ["audit", "Audit", "/console/audit"],
] as const;
export type Section = (typeof NAV)[number][0];

export interface Frame {
  title: string;
  section?: Section;
  session: Session | null;
  fleet?: string;
  fleets?: string[];
  flash?: { ok: boolean; text: string } | null;
}

export const Page = ({ frame, children }: { frame: Frame; children: Child }) => {
  const { session, fleet } = frame;
  const withFleet = (href: string) => (fleet ? `${href}?fleet=${encodeURIComponent(fleet)}` : href);
  return (
    <>
      {raw("<!DOCTYPE html>")}
      <html lang="en">
        <head>
          <meta charset="utf-8" />
          <meta name="viewport" content="width=device-width, initial-scale=1" />
          <meta name="color-scheme" content="light dark" />
          <title>{`${frame.title} · Harbormaster`}</title>
          <link rel="stylesheet" href={ASSETS.css.path} />
          <script type="module" src={ASSETS.js.path}></script>
        </head>
        <body
          data-csrf={session?.csrf ?? ""}
          data-fleet={session ? (fleet ?? "") : ""}
          data-scope={session?.scope ?? ""}
        >
          <a class="skip" href="#main">
            Skip to content
          </a>
          <header class="top">
            <a class="brand" href={withFleet("/console")}>
              <span aria-hidden="true">⚓ </span>Harbormaster
            </a>
            {session ? (
              <nav aria-label="Console">
                <ul>
                  {NAV.map(([key, label, href]) => (
                    <li>
                      <a href={withFleet(href)} aria-current={frame.section === key ? "page" : undefined}>
                        {label}
                      </a>
                    </li>
                  ))}
                </ul>
              </nav>
            ) : null}
            {session ? (
              <div class="end">
                {frame.fleets && frame.fleets.length > 0 ? (
                  <form method="get" action="/console" class="inline">
                    <label class="check">
                      Fleet
                      <select name="fleet" aria-label="Fleet">
                        {frame.fleets.map((f) => (
                          <option value={f} selected={f === fleet}>
                            {f}
                          </option>
                        ))}
                      </select>
                    </label>{" "}
                    <button type="submit">Show</button>
                  </form>
                ) : null}
                {fleet ? (
                  <span id="live" class="live off" role="status" aria-live="polite">
                    ○ Not live yet
                  </span>
                ) : null}
                <span class="badge t-idle" title="Your token's scope">
                  <span class="i" aria-hidden="true">
                    ◆
                  </span>
                  {session.scope}
                </span>
                <form method="post" action="/console/sign-out" class="inline">
                  <input type="hidden" name="_csrf" value={session.csrf} />
                  <button type="submit">Sign out</button>
                </form>
              </div>
            ) : null}
          </header>
          <main id="main">
            <Flash flash={frame.flash ?? null} />
            {children}
          </main>
        </body>
      </html>
    </>
  );
};

/** A titled table with a horizontal scroll on narrow screens. */
export const Table = ({
  caption,
  head,
  children,
  id,
}: {
  caption: string;
  head: (string | [string, string])[];
  children: Child;
  id?: string;
}) => (
  <div class="table" id={id} data-live={id ? "" : undefined}>
    <table>
      <caption class="skip">{caption}</caption>
      <thead>
        <tr>
          {head.map((h) =>
            typeof h === "string" ? (
              <th scope="col">{h}</th>
            ) : (
              <th scope="col" class={h[1]}>
                {h[0]}
              </th>
            ),
          )}
        </tr>
      </thead>
      <tbody>{children}</tbody>
    </table>
  </div>
);

/** A GET form of filters (role search), keeping the fleet in view. */
export const Filters = (props: {
  action: string;
  label: string;
  fleet?: string;
  children: Child;
  button?: string;
  clear?: string;
}) => (
  <form method="get" action={props.action} class="filters" role="search" aria-label={props.label}>
    {props.fleet ? <input type="hidden" name="fleet" value={props.fleet} /> : null}
    {props.children}
    <button type="submit">{props.button ?? "Filter"}</button>
    {props.clear ? <a href={props.clear}>Clear</a> : null}
  </form>
);

export const Field = ({
  label,
  name,
  value,
  ...rest
}: {
  label: string;
  name: string;
  value?: string;
  [attr: string]: unknown;
}) => (
  <label>
    {label}
    <input name={name} value={value ?? ""} {...rest} />
  </label>
);

export const Select = ({
  name,
  label,
  options,
  value,
}: {
  name: string;
  label: string;
  options: readonly string[];
  value?: string;
}) => (
  <label>
    {label}
    <select name={name}>
      <option value="">any</option>
      {options.map((o) => (
        <option value={o} selected={o === value}>
          {o.replace(/_/g, " ")}
        </option>
      ))}
    </select>
  </label>
);

export const canWrite = (s: Session | null) => !!s && s.scope !== "read";

const BLOCKED_LABEL: Record<string, string> = {
  window: "Window closed",
  gate: "Gate failing",
  budget: "Disruption budget",
  slots: "Slots taken",
  hold: "Hold",
  paused: "Paused",
  auto_paused: "Paused by itself",
  analysis: "Analysis",
  bake: "Baking",
  queue: "Queue",
};

/** Why something waits (its blocked_by), each reason in words, with its since and until. */
export const BlockedList = ({
  items,
  label = "Why it waits",
}: {
  items: readonly { kind: string; message: string; since?: string; until?: string }[];
  label?: string;
}) =>
  items.length === 0 ? null : (
    <ul class="blocked" aria-label={label}>
      {items.map((b) => (
        <li data-kind={b.kind}>
          <strong>{BLOCKED_LABEL[b.kind] ?? b.kind}:</strong> {b.message}
          {b.since ? (
            <>
              {" "}
              (since <Ago at={b.since} />)
            </>
          ) : null}
          {b.until ? (
            <>
              {" "}
              (until <Ago at={b.until} />)
            </>
          ) : null}
        </li>
      ))}
    </ul>
  );
