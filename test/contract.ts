/**
 * The contract check every test response goes through (helpers.send): the answer must be one the
 * OpenAPI document describes — its status listed for the operation, each of our headers it carries
 * documented for that status, and its JSON body valid against that status's schema. So the
 * document cannot drift from what the API really sends, on any path the suite exercises.
 */
import { SELF } from "cloudflare:test";
import { Validator, type Schema } from "@cfworker/json-schema";

/** Headers this API sets on purpose; each must be documented where it is sent. */
const OUR_HEADERS = ["etag", "location", "retry-after", "www-authenticate", "x-request-id"];
const ORIGIN = "https://hm.test";

type Doc = { paths: Record<string, Record<string, { responses: Record<string, any> }>> } & Record<string, unknown>;
let docPromise: Promise<{ doc: Doc; routes: { pattern: RegExp; template: string }[] }> | null = null;
const validators = new Map<string, Validator>();

function load() {
  docPromise ??= (async () => {
    const doc = (await (await SELF.fetch(`${ORIGIN}/openapi.json`)).json()) as Doc;
    const routes = Object.keys(doc.paths).map((template) => ({
      template,
      pattern: new RegExp(`^${template.replace(/[.*+?^$()|[\]\\]/g, "\\$&").replace(/\{[^}]+\}/g, "[^/]+")}$`),
    }));
    // Templates with fewer parameters first, so a literal segment wins over a parameter.
    routes.sort((a, b) => a.template.split("{").length - b.template.split("{").length);
    return { doc, routes };
  })();
  return docPromise;
}

const pointer = (...parts: string[]) => "#/" + parts.map((p) => p.replace(/~/g, "~0").replace(/\//g, "~1")).join("/");

function validatorFor(doc: Doc, ref: string) {
  let v = validators.get(ref);
  if (!v) {
    // The whole document is the root schema, so "#/components/schemas/…" references resolve in it.
    v = new Validator({ ...(doc as object), $ref: ref } as Schema, "2020-12", false);
    validators.set(ref, v);
  }
  return v;
}

export interface ContractViolation {
  where: string;
  problems: string[];
}

/** Problems of one answer against the document; empty when it conforms or no operation describes it. */
export async function contractProblems(
  method: string,
  url: string,
  res: Response,
  body: string,
): Promise<ContractViolation | null> {
  const { pathname } = new URL(url);
  if (pathname === "/openapi.json" || pathname.startsWith("/__")) return null;
  const { doc, routes } = await load();
  const route = routes.find((r) => r.pattern.test(pathname));
  const m = method.toLowerCase() === "head" ? "get" : method.toLowerCase();
  const operation = route && doc.paths[route.template][m];
  // 404 for an unknown path and 405 for an unknown method are not any operation's answers.
  if (!operation) return null;
  const where = `${method} ${route.template} → ${res.status}`;
  const problems: string[] = [];
  const status = String(res.status);
  const response = operation.responses[status] ?? operation.responses[`${status[0]}XX`] ?? operation.responses.default;
  if (!response)
    return {
      where,
      problems: [`status ${status} is not documented (documented: ${Object.keys(operation.responses).join(", ")})`],
    };
  const documented = new Set(Object.keys(response.headers ?? {}).map((h) => h.toLowerCase()));
  for (const h of OUR_HEADERS) {
    if (res.headers.has(h) && !documented.has(h)) problems.push(`header ${h} is sent but not documented`);
  }
  const type = res.headers.get("Content-Type") ?? "";
  const mediaTypes = Object.keys(response.content ?? {});
  if (body.length === 0) {
    if (mediaTypes.length && res.status !== 304 && method !== "HEAD")
      problems.push("no body, but the document describes one");
  } else if (type.startsWith("application/json")) {
    const media =
      mediaTypes.find((t) => t === "application/json") ?? mediaTypes.find((t) => t.includes("json") || t === "*/*");
    if (!media) problems.push(`a JSON body is sent but the document describes ${mediaTypes.join(", ") || "none"}`);
    else if (response.content[media].schema) {
      const ref = pointer(
        "paths",
        route.template,
        m,
        "responses",
        operation.responses[status]
          ? status
          : Object.keys(operation.responses).find((k) => operation.responses[k] === response)!,
        "content",
        media,
        "schema",
      );
      const result = validatorFor(doc, ref).validate(JSON.parse(body));
      if (!result.valid) {
        problems.push(
          ...result.errors
            .filter(
              (e) => !/^(?:A subschema had errors|Instance does not match)/.test(e.error) || result.errors.length === 1,
            )
            .slice(0, 6)
            .map((e) => `body ${e.instanceLocation}: ${e.error}`),
        );
      }
    }
  } else if (!mediaTypes.some((t) => type.startsWith(t))) {
    problems.push(`Content-Type ${type} is not documented (${mediaTypes.join(", ")})`);
  }
  return problems.length ? { where, problems } : null;
}
