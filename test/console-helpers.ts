import { SELF } from "cloudflare:test";
import { ADMIN, BASE } from "./helpers";

/** The console's cookies are __Host- prefixed off loopback (the tests' origin is https://hm.test). */
export const SESSION = "__Host-hm_session";

export function cookiesOf(res: Response) {
  const out: Record<string, { value: string; attrs: string }> = {};
  for (const line of res.headers.getSetCookie()) {
    const [pair, ...attrs] = line.split(";");
    const i = pair.indexOf("=");
    out[pair.slice(0, i).trim()] = { value: pair.slice(i + 1), attrs: attrs.join(";").trim() };
  }
  return out;
}

function form(fields: Record<string, string>) {
  return new URLSearchParams(fields).toString();
}

/** A browser-like console request: cookies, and Origin on POSTs (as browsers send it). */
export async function consoleFetch(
  path: string,
  init: {
    method?: string;
    cookie?: string;
    body?: Record<string, string>;
    origin?: string | null;
    headers?: Record<string, string>;
  } = {},
) {
  const headers: Record<string, string> = { ...init.headers };
  if (init.cookie) headers.Cookie = init.cookie;
  const method = init.method ?? (init.body ? "POST" : "GET");
  if (method !== "GET" && init.origin !== null) headers.Origin = init.origin ?? BASE;
  if (init.body) headers["Content-Type"] = "application/x-www-form-urlencoded";
  return SELF.fetch(`${BASE}${path}`, {
    method,
    headers,
    body: init.body ? form(init.body) : undefined,
    redirect: "manual",
  });
}

/** Signs in through the form; returns the session cookie header and the page's CSRF token. */
export async function signIn(token = ADMIN) {
  const page = await consoleFetch("/console/sign-in");
  const signin = cookiesOf(page)["__Host-hm_signin"].value;
  const html = await page.text();
  const csrf = /name="_csrf" value="([^"]+)"/.exec(html)![1];
  const res = await consoleFetch("/console/sign-in", {
    cookie: `__Host-hm_signin=${signin}`,
    body: { _csrf: csrf, token, next: "/console" },
  });
  if (res.status !== 303) throw new Error(`sign-in: ${res.status} ${await res.text()}`);
  const sid = cookiesOf(res)[SESSION];
  const cookie = `${SESSION}=${sid.value}`;
  const overview = await consoleFetch("/console/audit", { cookie });
  const pageCsrf = /data-csrf="([^"]+)"/.exec(await overview.text())![1];
  return { cookie, csrf: pageCsrf, sid: sid.value, setCookie: sid.attrs };
}
