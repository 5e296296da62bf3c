/**
 * The console reads and acts only through the app's own HTTP API, called in-process with the
 * session's operator token: the API keeps deciding what the token may do, and the console does not
 * depend on how features are built inside.
 */
import type { Context } from "hono";
import type { z } from "zod";
import type { Env } from "../env";

/** What the console needs of the app: hono's `request`. */
export interface InProcessApp {
  request(input: string, init: RequestInit, env: Env, ctx?: ExecutionContext): Response | Promise<Response>;
}

export interface ApiAnswer<T = unknown> {
  status: number;
  ok: boolean;
  json: T;
  headers: Headers;
}

export class ApiFailure extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** The API answers JSON; anything else (a proxy's page) is kept as text for the message. */
function jsonOrText(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

export type Api = <T = unknown>(
  method: string,
  path: string,
  body?: unknown,
  extraHeaders?: Record<string, string>,
) => Promise<ApiAnswer<T>>;

export function apiFor(c: Context, getApp: () => InProcessApp, token: string): Api {
  return async (method, path, body, extraHeaders) => {
    const headers: Record<string, string> = { ...extraHeaders, Authorization: `Bearer ${token}` };
    const requestId = c.req.header("X-Request-Id");
    if (requestId) headers["X-Request-Id"] = requestId;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let ctx: ExecutionContext | undefined;
    try {
      ctx = c.executionCtx as ExecutionContext;
    } catch {
      ctx = undefined;
    }
    const res = await getApp().request(
      new URL(path, c.req.url).toString(),
      { method, headers, body: body === undefined ? undefined : JSON.stringify(body) },
      c.env as Env,
      ctx,
    );
    const text = await res.text();
    return { status: res.status, ok: res.ok, json: (text ? jsonOrText(text) : null) as never, headers: res.headers };
  };
}

/** The answer's JSON when it succeeded, else an ApiFailure carrying the API's own message. */
export async function must<T = unknown>(answer: Promise<ApiAnswer<T>>): Promise<T> {
  const a = await answer;
  if (a.ok) return a.json;
  const err = (a.json as { error?: { code?: string; message?: string } } | null)?.error;
  throw new ApiFailure(a.status, err?.code ?? "error", err?.message ?? `the API answered ${a.status}`);
}

/** What a list route answers: a page of items and the next page's cursor. */
type Page<T> = { items: T[]; next_cursor: string | null };

/** A list route's answer, typed by the published schema of one item. */
export type PageOf<S extends z.ZodType> = Page<z.output<S>>;

/**
 * GET `path`, typed as `schema`: the answer schema the API publishes for that route (its OpenAPI
 * response), which the route's handler is type-checked against. The JSON is not parsed again: it
 * comes from this Worker's own routes, in-process.
 */
export function read<S extends z.ZodType>(v: { api: Api }, schema: S, path: string): Promise<z.output<S>> {
  return must(v.api<z.output<S>>("GET", path));
}

/** GET a list route's page, its items typed as `item`: the schema the API publishes for one. */
export function readPage<S extends z.ZodType>(v: { api: Api }, item: S, path: string): Promise<PageOf<S>> {
  return must(v.api<PageOf<S>>("GET", path));
}

/** A write (`POST`, `PUT`, `DELETE`) whose answer is typed as `schema`, as `read` does for a GET. */
export function send<S extends z.ZodType>(
  v: { api: Api },
  schema: S,
  method: string,
  path: string,
  body?: unknown,
): Promise<z.output<S>> {
  return must(v.api<z.output<S>>(method, path, body));
}

/** A query string from the defined, non-empty values. */
export function qs(params: Record<string, string | number | undefined | null>) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : "";
}
