import type { RouterRoute } from "hono/types";

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/**
 * One segment of a hono path as a regular expression. A constrained parameter (`:id{[0-9a-f-]{36}}`)
 * keeps its constraint: a value the route would not take is a missing page (404), not a wrong method.
 */
function segmentPattern(seg: string): string {
  if (seg === "*") return ".*";
  if (!seg.startsWith(":")) return escape(seg);
  const open = seg.indexOf("{");
  const optional = seg.endsWith("?");
  const body = optional ? seg.slice(0, -1) : seg;
  const pattern = open > 0 && body.endsWith("}") ? `(?:${body.slice(open + 1, -1)})` : "[^/]+";
  return optional ? `(?:${pattern})?` : pattern;
}

/** A hono path split at the slashes that separate segments (not those inside a `{…}` constraint). */
function segments(path: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let current = "";
  for (const ch of path) {
    if (ch === "{") depth++;
    else if (ch === "}") depth--;
    if (ch === "/" && depth === 0) {
      out.push(current);
      current = "";
    } else current += ch;
  }
  out.push(current);
  return out;
}

/**
 * For a path no handler answered for its method: the methods that path does answer, so the edge
 * can say 405 with `Allow` instead of a misleading 404. Built from the app's own routes.
 */
export function allowedMethodsFinder(routes: () => RouterRoute[]) {
  let table: { pattern: RegExp; method: string }[] | null = null;
  return (path: string): string[] => {
    table ??= routes()
      .filter((r) => r.method !== "ALL")
      .map((r) => ({
        method: r.method.toUpperCase(),
        pattern: new RegExp(`^${segments(r.path).map(segmentPattern).join("/")}$`),
      }));
    const methods = new Set(table.filter((r) => r.pattern.test(path)).map((r) => r.method));
    // Hono answers HEAD for every GET route.
    if (methods.has("GET")) methods.add("HEAD");
    return [...methods].sort();
  };
}
