import { createMiddleware } from "hono/factory";
import type { AppEnv } from "./types";

/**
 * For a POST that creates a resource with its own URL: a 201 gets `Location: <request path>/<id>`,
 * the id read from the answer's JSON. Declared next to the route (its `middleware`), so the
 * handler stays about the resource.
 */
export const locationOfCreated = createMiddleware<AppEnv>(async (c, next) => {
  await next();
  if (c.res.status !== 201 || c.res.headers.has("Location")) return;
  const body = (await c.res.clone().json()) as { id?: unknown };
  if (typeof body?.id !== "string") return;
  c.header("Location", `${c.req.path.replace(/\/+$/, "")}/${encodeURIComponent(body.id)}`);
});
