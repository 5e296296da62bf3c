/** @jsxImportSource hono/jsx */
/** What every console page and action shares: its API client, the fleet in view, flash messages, errors. */
import type { Context } from "hono";
import type { Child } from "hono/jsx";
import { apiFor, ApiFailure, must, qs, type Api, type InProcessApp } from "./api";
import type { ConsoleEnv } from "./guard";
import { endSession, readConsoleCookie, setConsoleCookie, type Session } from "./session";
import { ERROR_TITLES, type ErrorStatus } from "./statuses";
import { Page, type Frame, type Section } from "./ui";

export type Ctx = Context<ConsoleEnv>;

/** What the console needs of a fleet in the switcher and the lists. */
interface FleetBrief {
  id: string;
  stale_after_s: number;
}

export interface View {
  c: Ctx;
  api: Api;
  session: Session;
  fleets: string[];
  /** The fleets' settings the lists need (stale-after, for how fresh a last report is). */
  fleetInfo: FleetBrief[];
  /** The fleet in view: ?fleet=, else the first. Undefined when there is none. */
  fleet: string | undefined;
}

/** Fleets for the switcher: the first page is plenty for a selector; more are reachable by URL. */
async function viewOf(c: Ctx, getApp: () => InProcessApp): Promise<View> {
  const session = c.get("session");
  const api = apiFor(c, getApp, session.token);
  const list = await must<{ items: FleetBrief[] }>(api("GET", `/v1/fleets${qs({ limit: 200 })}`));
  const fleets = list.items.map((f) => f.id);
  const asked = c.req.query("fleet");
  const fleet = asked && /^[a-z0-9][a-z0-9-]{0,62}$/.test(asked) ? asked : fleets[0];
  return { c, api, session, fleets, fleetInfo: list.items, fleet };
}

/** The stale-after of `fleet`, when it is among the fleets read for the switcher. */
export const staleAfterOf = (v: View, fleet: string | undefined) =>
  v.fleetInfo.find((f) => f.id === fleet)?.stale_after_s;

const FLASH = "hm_flash";

function setFlash(c: Ctx, flash: { ok: boolean; text: string }) {
  const bytes = new TextEncoder().encode(JSON.stringify({ ok: flash.ok, text: flash.text.slice(0, 600) }));
  setConsoleCookie(c, FLASH, btoa(String.fromCharCode(...bytes)).replace(/=+$/, ""), 60);
}

/** The message an action left for the page it redirected to; read once. */
function takeFlash(c: Ctx): { ok: boolean; text: string } | null {
  const raw = readConsoleCookie(c, FLASH);
  if (!raw) return null;
  setConsoleCookie(c, FLASH, "", 0);
  try {
    const parsed = JSON.parse(new TextDecoder().decode(Uint8Array.from(atob(raw), (ch) => ch.charCodeAt(0))));
    return typeof parsed?.text === "string" ? { ok: parsed.ok === true, text: parsed.text } : null;
  } catch {
    return null;
  }
}

export function render(
  v: View,
  section: Section | undefined,
  title: string,
  body: Child,
  status: 200 | 403 | 404 | 409 | 422 | 502 = 200,
) {
  const frame: Frame = { title, section, session: v.session, fleet: v.fleet, fleets: v.fleets, flash: takeFlash(v.c) };
  return v.c.html(<Page frame={frame}>{body}</Page>, status);
}

export const NoFleet = ({ session }: { session: Session }) =>
  session.fleets === "*" ? (
    <div class="card">
      <h1>No fleet yet</h1>
      <p>
        Create one with <code>hm fleets create NAME</code> or <code>POST /v1/fleets</code>; it shows up here.
      </p>
    </div>
  ) : (
    <div class="card">
      <h1>None of your fleets exists yet</h1>
      <p>
        Your token may act on {session.fleets.join(", ")} only (<a href="/console/me">what you may do</a>); once one of
        them is created it shows up here.
      </p>
    </div>
  );

/** An error as a console page (HTML, in the console's frame), never as the API's JSON. */
export function errorPage(
  c: Context,
  status: ErrorStatus,
  message: Child,
  opts: { session?: Session | null; section?: Section; fleet?: string; detail?: string } = {},
) {
  const frame: Frame = {
    title: ERROR_TITLES[status],
    section: opts.section,
    session: opts.session ?? null,
    fleet: opts.fleet,
  };
  return c.html(
    <Page frame={frame}>
      <div class="card error" role="alert">
        <h1>
          {ERROR_TITLES[status]} <span class="muted">({status})</span>
        </h1>
        <p>{message}</p>
        {opts.detail ? <p class="muted small">{opts.detail}</p> : null}
        <p>
          <a href={opts.session ? "/console/fleets" : "/console"}>Back to the console</a>
        </p>
      </div>
    </Page>,
    status,
  );
}

/**
 * An API refusal while rendering: 401 means the token no longer works (revoked, or ADMIN_TOKEN
 * changed), so the session ends; anything else is shown with the API's own words.
 */
async function failurePage(c: Ctx, err: ApiFailure, section?: Section) {
  const session = c.get("session");
  if (err.status === 401) {
    await endSession(c, session);
    return c.redirect("/console/sign-in?ended=1", 303);
  }
  // The API's refusal of what the page was asked for (a bad filter or cursor in the address) is the
  // request's fault, as the API says: only an answer the API should not give is a bad gateway.
  const status: ErrorStatus = [400, 403, 404, 409, 422].includes(err.status) ? (err.status as ErrorStatus) : 502;
  return errorPage(c, status, err.message, {
    session,
    section,
    fleet: c.req.query("fleet"),
    detail: `The API answered ${err.status} ${err.code}.`,
  });
}

/** Where an action sends the browser back to: a console path named by the form, else `fallback`. */
export function backTo(value: unknown, fallback: string) {
  return typeof value === "string" && /^\/console(\/|\?|$)/.test(value) && !value.startsWith("//") ? value : fallback;
}

/** Runs a page; an API failure becomes a page (or the end of the session). */
export function page(getApp: () => InProcessApp, section: Section | undefined, build: (v: View) => Promise<Response>) {
  return async (c: Ctx) => {
    try {
      return await build(await viewOf(c, getApp));
    } catch (err) {
      if (err instanceof ApiFailure) return failurePage(c, err, section);
      throw err;
    }
  };
}

/**
 * Runs an action: `run` calls the API and returns the message to show; the browser goes back
 * (303) to the page it came from, which shows the message. A refusal is shown the same way.
 */
export function action(
  getApp: () => InProcessApp,
  fallback: string,
  run: (v: View, form: Record<string, string>) => Promise<string | Response>,
) {
  return async (c: Ctx) => {
    const raw = await c.req.parseBody();
    const form: Record<string, string> = {};
    for (const [k, val] of Object.entries(raw)) if (typeof val === "string") form[k] = val;
    const back = backTo(form.back, fallback);
    try {
      const v = await viewOf(c, getApp);
      const out = await run(v, form);
      if (out instanceof Response) return out;
      setFlash(c, { ok: true, text: out });
    } catch (err) {
      if (err instanceof ApiFailure) {
        if (err.status === 401) return failurePage(c, err);
        setFlash(c, { ok: false, text: `${err.message} (${err.code})` });
      } else if (err instanceof ConfirmationMissing) {
        setFlash(c, { ok: false, text: err.message });
      } else throw err;
    }
    return c.redirect(back, 303);
  };
}

class ConfirmationMissing extends Error {}

/** A typed confirmation: the form's `confirm` must repeat `expected` exactly. */
export function confirmTyped(form: Record<string, string>, expected: string, what: string) {
  if ((form.confirm ?? "").trim() !== expected)
    throw new ConfirmationMissing(`Not done: type ${what} (${expected}) to confirm.`);
}
