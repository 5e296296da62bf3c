import type { RouterRoute } from "hono/types";

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
        pattern: new RegExp(
          `^${r.path
            .split("/")
            .map((seg) =>
              seg.startsWith(":") ? "[^/]+" : seg === "*" ? ".*" : seg.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"),
            )
            .join("/")}$`,
        ),
      }));
    const methods = new Set(table.filter((r) => r.pattern.test(path)).map((r) => r.method));
    // Hono answers HEAD for every GET route.
    if (methods.has("GET")) methods.add("HEAD");
    return [...methods].sort();
  };
}
