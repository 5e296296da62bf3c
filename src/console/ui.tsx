/** @jsxImportSource hono/jsx */
/** The console's shared pieces: the page frame, status badges, times, pagers, forms. */
import { raw } from "hono/html";
import type { Child } from "hono/jsx";
import { ASSETS } from "./assets";
import type { Session } from "./session";

/**
 * The icons, drawn as inline SVG (16×16, currentColor): a text glyph such as ⏸ needs a font that
 * has it, and Debian's default fonts do not, so it rendered as an empty box.
 */
const ICONS = {
  check: <path d="M3 8.5l3 3 7-7" />,
  dot: <circle cx="8" cy="8" r="4" fill="currentColor" />,
  ring: <circle cx="8" cy="8" r="5" />,
  half: (
    <>
      <circle cx="8" cy="8" r="5.5" />
      <path d="M8 2.5v5.5h5.5" />
    </>
  ),
  play: <path d="M5 3l8 5-8 5z" fill="currentColor" />,
  dashed: <circle cx="8" cy="8" r="5.5" stroke-dasharray="2.5 2" />,
  more: (
    <>
      <circle cx="3" cy="8" r="1.3" fill="currentColor" />
      <circle cx="8" cy="8" r="1.3" fill="currentColor" />
      <circle cx="13" cy="8" r="1.3" fill="currentColor" />
    </>
  ),
  cross: <path d="M4 4l8 8M12 4l-8 8" />,
  warning: <path d="M8 2L1.5 14h13zM8 6.5v3.5M8 11.5v1" />,
  differs: <path d="M3 6h10M3 10h10M11 3L5 13" />,
  clock: <path d="M8 2.5a5.5 5.5 0 1 0 0.01 0zM8 5v3.5l2.5 1.5" />,
  question: <path d="M5.5 6a2.5 2.5 0 1 1 3.5 2.3c-.7.3-1 .8-1 1.5v.7M8 12.5v1" />,
  pause: <path d="M5.5 3.5v9M10.5 3.5v9" stroke-width="2.5" />,
  square: <rect x="4" y="4" width="8" height="8" fill="currentColor" />,
  eject: <path d="M3 9.5L8 4l5 5.5zM3 12.5h10" />,
  empty: <path d="M8 2.5a5.5 5.5 0 1 0 0.01 0zM3 13L13 3" />,
  banned: <path d="M8 2.5a5.5 5.5 0 1 0 0.01 0zM4.2 4.2l7.6 7.6" />,
  skip: <path d="M3 11a5 5 0 0 1 9-4M12 3v4h-4" />,
  back: <path d="M13 11a5 5 0 0 0-9-4M4 3v4h4" />,
  diamond: <path d="M8 2l6 6-6 6-6-6z" fill="currentColor" />,
  bullet: <circle cx="8" cy="8" r="2" fill="currentColor" />,
  anchor: <path d="M8 5v9M5 7.5h6M3 10a5 4 0 0 0 10 0M8 1.5a1.7 1.7 0 1 0 0.01 0" />,
} as const;
type IconName = keyof typeof ICONS;

/** An icon beside a word: decorative, the word says the same. */
const Icon = ({ name, label }: { name: IconName; label?: string }) => (
  <svg
    class="icon"
    viewBox="0 0 16 16"
    width="14"
    height="14"
    fill="none"
    stroke="currentColor"
    stroke-width="1.8"
    stroke-linecap="round"
    stroke-linejoin="round"
    aria-hidden={label ? undefined : "true"}
    role={label ? "img" : undefined}
    aria-label={label}
    focusable="false"
  >
    {ICONS[name]}
  </svg>
);

/** Every status word with its icon and tone: never colour alone. */
const TONES: Record<string, [icon: IconName, tone: string]> = {
  realized: ["check", "ok"],
  succeeded: ["check", "ok"],
  done: ["check", "ok"],
  active: ["dot", "ok"],
  open: ["ring", "ok"],
  connected: ["dot", "ok"],
  pending: ["half", "info"],
  applying: ["half", "info"],
  running: ["play", "info"],
  provisioning: ["dashed", "info"],
  queued: ["more", "idle"],
  failed: ["cross", "bad"],
  removal_failed: ["cross", "bad"],
  stuck: ["warning", "bad"],
  timed_out: ["clock", "bad"],
  drifted: ["differs", "warn"],
  stale: ["clock", "warn"],
  unknown: ["question", "idle"],
  paused: ["pause", "warn"],
  closed: ["square", "idle"],
  decommissioning: ["eject", "warn"],
  removal_pending: ["eject", "warn"],
  removed: ["empty", "idle"],
  cancelled: ["banned", "idle"],
  skipped: ["skip", "idle"],
  rolling_back: ["back", "warn"],
  rolled_back: ["back", "idle"],
  slow: ["clock", "warn"],
  waiting: ["more", "idle"],
  waiting_budget: ["more", "warn"],
};

export const Badge = ({ status, label }: { status: string; label?: string }) => {
  const [icon, tone] = TONES[status] ?? ["bullet", "idle"];
  return (
    <span class={`badge t-${tone}`} data-status={status}>
      <Icon name={icon} />
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

/**
 * A duration for people: "372 ms" and "3.7 s" below ten seconds (a whole-second figure said "0 s"
 * for work that took a third of one), whole seconds, minutes and hours above.
 */
function durationText(seconds: number) {
  const x = Math.max(0, seconds);
  if (x < 0.9995) return `${Math.round(x * 1000)} ms`;
  if (x < 9.95) return `${(Math.round(x * 10) / 10).toFixed(1)} s`;
  const s = Math.round(x);
  const [h, m, rest] = [Math.floor(s / 3600), Math.floor((s % 3600) / 60), s % 60];
  if (h) return m ? `${h}h ${m}m` : `${h}h`;
  if (m) return rest ? `${m}m ${rest}s` : `${m}m`;
  return `${s} s`;
}

/** A time read from its owner (a server's ledger), so exact: "9s ago", the UTC time on hover. */
export const ExactTime = ({ at }: { at: string | null | undefined }) => {
  if (!at) return <span class="muted">never</span>;
  const ms = Date.parse(at);
  return (
    <time datetime={new Date(ms).toISOString()} title={absolute(ms)} data-rel="" data-exact="">
      {relative(ms)}
    </time>
  );
};

export const Duration = ({ seconds }: { seconds: number }) => (
  <span title={`${Math.round(Math.max(0, seconds) * 1000) / 1000} seconds`}>{durationText(seconds)}</span>
);

/** Hostnames as people count: sim-2 before sim-10 (digits compared as numbers). */
const NATURAL = new Intl.Collator("en", { numeric: true, sensitivity: "base" });
const naturalCompare = (a: string, b: string) => NATURAL.compare(a, b) || (a < b ? -1 : a > b ? 1 : 0);
/** A copy of `rows` in natural order of `key` (a hostname). */
export const naturally = <T,>(rows: readonly T[], key: (row: T) => string | null | undefined) =>
  [...rows].sort((a, b) => naturalCompare(key(a) ?? "", key(b) ?? ""));

/** A console URL for one server: by hostname (the API resolves it within the fleet), else by id. */
export const serverHref = (s: { id: string; hostname?: string | null; fleet?: string | null }) =>
  s.hostname
    ? `/console/servers/${encodeURIComponent(s.hostname)}${s.fleet ? `?fleet=${encodeURIComponent(s.fleet)}` : ""}`
    : `/console/servers/${s.id}${s.fleet ? `?fleet=${encodeURIComponent(s.fleet)}` : ""}`;

/**
 * A server's last report as the fleet-wide index knows it. The index is written on change: for a host
 * that keeps reporting the same thing its time is refreshed only every few minutes (an hour while
 * the host is watched), so the index's figure can be minutes old while the host reported seconds ago.
 * A server that is neither stale nor silent reported within its fleet's stale-after, so past that
 * age the list says "within" it rather than a time it knows to be wrong; the server's own page, read
 * from its ledger, has the exact time.
 */
export const LastReport = ({
  at,
  status,
  staleAfterS,
  now = Date.now(),
}: {
  at: string | null | undefined;
  status: string;
  staleAfterS: number | undefined;
  now?: number;
}) => {
  if (!at) return <span class="muted">never</span>;
  const ms = Date.parse(at);
  const reporting = status !== "stale" && status !== "unknown";
  if (!reporting || staleAfterS === undefined || now - ms <= staleAfterS * 1000) return <Ago at={at} />;
  return (
    <span
      class="fresh"
      data-within={staleAfterS}
      title={`Reported within the last ${durationText(staleAfterS)} (not stale); the index's time, ${absolute(ms)}, is refreshed every few minutes while nothing changes. The server's page has the exact time.`}
    >
      within {durationText(staleAfterS)}
    </span>
  );
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

/**
 * The form of an action that cannot be undone: a danger button and, when `typed` asks for it, a
 * confirmation the operator types, which the action checks against what it names (`confirmTyped`
 * in context.tsx); `pattern` lets the browser refuse a wrong one before anything is sent. `fields`
 * are the hidden inputs that say what the action is about.
 */
export const DangerForm = (props: {
  action: string;
  csrf: string;
  back: string;
  label: string;
  button: string;
  fields?: Record<string, string>;
  typed?: { prompt: string; size?: number; pattern?: string };
}) => (
  <ActionForm action={props.action} csrf={props.csrf} back={props.back} label={props.label}>
    {Object.entries(props.fields ?? {}).map(([name, value]) => (
      <input type="hidden" name={name} value={value} />
    ))}
    {props.typed ? (
      <label>
        {props.typed.prompt}
        <input name="confirm" required autocomplete="off" size={props.typed.size} pattern={props.typed.pattern} />
      </label>
    ) : null}
    <button type="submit" class="danger">
      {props.button}
    </button>
  </ActionForm>
);

const Flash = ({ flash }: { flash: { ok: boolean; text: string } | null }) =>
  flash ? (
    <div class={`flash ${flash.ok ? "ok" : "bad"}`} role={flash.ok ? "status" : "alert"}>
      <strong>
        <Icon name={flash.ok ? "check" : "cross"} /> {flash.ok ? "Done: " : "Failed: "}
      </strong>
      {flash.text}
    </div>
  ) : null;

const NAV = [
  ["fleets", "All fleets", "/console/fleets"],
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
          <link rel="icon" type="image/svg+xml" href={ASSETS.icon.path} />
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
            <a class="brand" href={session ? "/console/fleets" : "/console"}>
              <Icon name="anchor" /> Harbormaster
            </a>
            {session ? (
              <nav aria-label="Console">
                <ul>
                  {NAV.map(([key, label, href]) => (
                    <li>
                      <a
                        href={key === "fleets" ? href : withFleet(href)}
                        aria-current={frame.section === key ? "page" : undefined}
                      >
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
                <a
                  id="who"
                  class="badge t-idle"
                  href="/console/me"
                  title={`Signed in through ${session.via === "bootstrap" ? "ADMIN_TOKEN" : session.via === "token" ? "an operator token" : "single sign-on"}: scope ${session.scope}, ${session.fleets === "*" ? "every fleet" : `fleets ${session.fleets.join(", ")}`}`}
                >
                  <Icon name="diamond" />
                  {session.name} · {session.scope}
                  {session.fleets === "*"
                    ? ""
                    : ` · ${session.fleets.length} fleet${session.fleets.length === 1 ? "" : "s"}`}
                </a>
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

/**
 * A titled table. On a narrow screen it scrolls sideways inside its own box (a labelled region
 * that takes focus, so the keyboard can scroll it too) and the page itself never does.
 */
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
  <div class="table" id={id} data-live={id ? "" : undefined} role="region" aria-label={caption} tabindex={0}>
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
