import { matchedRoutes } from "hono/route";
import type { Context } from "hono";
import { z } from "@hono/zod-openapi";
import { DomainError } from "../domain/errors";
import type { AppEnv } from "./types";

type RouteDefinition = {
  type: string;
  route?: { method: string; path: string; request?: { query?: unknown }; parameters?: unknown[] };
};

/**
 * Unknown query parameters are refused (400 invalid_query naming them): a typo such as
 * `?hostnme=` would otherwise be ignored and the unfiltered list returned, which is dangerous in
 * scripts. The parameters each route takes are read from the OpenAPI registry, i.e. from the very
 * schemas that validate and document them, so every route, present and future, follows the rule.
 * A check, not a middleware: the /v1 request rules (./content.ts) run it after the body's.
 */
export function rejectUnknownQuery(definitions: () => readonly RouteDefinition[]) {
  let allowed: Map<string, Set<string>> | null = null;
  const table = () => {
    allowed = new Map();
    for (const def of definitions()) {
      if (def.type !== "route" || !def.route) continue;
      const query = def.route.request?.query;
      const keys = query instanceof z.ZodObject ? Object.keys(query.shape) : query === undefined ? [] : null;
      if (keys === null) continue; // a query schema this check cannot read: left to the route's validator
      // Parameters a route documents by hand and validates itself (`parameters: [{ in: "query" }]`).
      for (const p of def.route.parameters ?? []) {
        const param = p as { in?: string; name?: string };
        if (param.in === "query" && typeof param.name === "string") keys.push(param.name);
      }
      allowed.set(`${def.route.method.toUpperCase()} ${def.route.path.replace(/{(\w+)}/g, ":$1")}`, new Set(keys));
    }
    return allowed;
  };
  return (c: Context<AppEnv>) => {
    const url = c.req.url;
    const q = url.indexOf("?");
    if (q < 0 || q === url.length - 1) return;
    const route = matchedRoutes(c).at(-1);
    const keys = route && (allowed ?? table()).get(`${route.method} ${route.path}`);
    if (keys) {
      const unknown = [...new Set(new URL(url).searchParams.keys())].filter((k) => !keys.has(k));
      if (unknown.length) {
        throw new DomainError(
          "invalid_query",
          `unknown query parameter${unknown.length > 1 ? "s" : ""}: ${unknown.join(", ")}` +
            (keys.size ? ` (this endpoint takes ${[...keys].join(", ")})` : " (this endpoint takes none)"),
          { unknown, allowed: [...keys] },
        );
      }
    }
  };
}
