/**
 * A request body is read as what its headers claim, or refused: bytes are only ever decoded as
 * UTF-8 without a content coding, so a body that declares anything else (gzip, a UTF-16 charset)
 * would otherwise be read as something it is not.
 */
import { bodyLimit } from "hono/body-limit";
import type { Context, MiddlewareHandler } from "hono";
import { DomainError } from "../domain/errors";
import type { AppEnv } from "./types";

export type BodyClaimProblem =
  | { code: "unsupported_content_encoding"; message: string; details: { content_encoding: string } }
  | { code: "unsupported_charset"; message: string; details: { charset: string } };

/** The codings a body may declare: none, or `identity` (RFC 9110 §8.4.1). */
const IDENTITY = new Set(["", "identity"]);
const UTF8 = new Set(["utf-8", "utf8"]);

/** The charset parameter of a Content-Type, lower-cased and unquoted, or null when absent. */
function charsetOf(contentType: string | undefined): string | null {
  if (!contentType) return null;
  for (const param of contentType.split(";").slice(1)) {
    const eq = param.indexOf("=");
    if (eq < 0) continue;
    if (param.slice(0, eq).trim().toLowerCase() !== "charset") continue;
    return param
      .slice(eq + 1)
      .trim()
      .replace(/^"(.*)"$/, "$1")
      .toLowerCase();
  }
  return null;
}

/** Why a body's declared coding or charset cannot be read as UTF-8 text, or null when it can. */
export function bodyClaimProblem(headers: { get(name: string): string | null }): BodyClaimProblem | null {
  const encoding = headers.get("Content-Encoding");
  if (encoding !== null) {
    const codings = encoding.split(",").map((c) => c.trim().toLowerCase());
    if (codings.some((c) => !IDENTITY.has(c))) {
      return {
        code: "unsupported_content_encoding",
        message: `bodies are read as sent; Content-Encoding '${encoding}' is not supported (send it uncompressed)`,
        details: { content_encoding: encoding },
      };
    }
  }
  const charset = charsetOf(headers.get("Content-Type") ?? undefined);
  if (charset !== null && !UTF8.has(charset)) {
    return {
      code: "unsupported_charset",
      message: `bodies are UTF-8; charset '${charset}' is not supported`,
      details: { charset },
    };
  }
  return null;
}

/**
 * Bodies are UTF-8 JSON, sent as is. A body sent as anything else (curl's -d defaults to form
 * encoding) would be read as an empty object and fail validation confusingly, and one declaring a
 * content coding or charset would be read as something it is not, so each is refused by name.
 * Answers whether there is a JSON body to read (none on a GET, a HEAD or an empty body).
 */
function requireJsonBody(c: Context<AppEnv>): boolean {
  if (c.req.method === "GET" || c.req.method === "HEAD") return false;
  const headers = c.req.raw.headers;
  const type = headers.get("Content-Type");
  const hasBody = c.req.raw.body !== null && headers.get("Content-Length") !== "0";
  if (!hasBody) return false;
  const claim = bodyClaimProblem(headers);
  if (claim?.code === "unsupported_content_encoding") throw new DomainError(claim.code, claim.message, claim.details);
  if (!(type && /^application\/([\w.-]+\+)?json\s*(;|$)/i.test(type))) {
    throw new DomainError("unsupported_media_type", "send the body as JSON with Content-Type: application/json");
  }
  if (claim) throw new DomainError(claim.code, claim.message, claim.details);
  return true;
}

const tooLarge = (maxBytes: number) =>
  new DomainError("payload_too_large", `request bodies are limited to ${maxBytes} bytes`);

/** Whether text decoded from UTF-8 was more than `maxBytes` bytes (a code unit is 1 to 3 of them). */
function textOverBytes(text: string, maxBytes: number): boolean {
  if (text.length > maxBytes) return true;
  if (text.length * 3 <= maxBytes) return false;
  return new TextEncoder().encode(text).byteLength > maxBytes;
}

/** A body of unknown length, counted as it streams in and refused once past `maxBytes`. */
const countedLimit = (maxBytes: number) =>
  bodyLimit({
    maxSize: maxBytes,
    onError: () => {
      throw tooLarge(maxBytes);
    },
  });

const proceed = async () => {};

/**
 * The size rule's first half, before the body is read: a body with a Content-Length (and no
 * Transfer-Encoding) is refused by that number, and one of unknown length is counted as it streams
 * in (never held whole past the limit). True when the length was declared: the header may lie
 * (it is the client's word), so the text must be measured once read (`textWithin`).
 */
async function declaredWithin(c: Context<AppEnv>, maxBytes: number, counted: MiddlewareHandler): Promise<boolean> {
  const raw = c.req.raw;
  if (raw.body === null) return false;
  const length = raw.headers.get("Content-Length");
  if (length === null || raw.headers.has("Transfer-Encoding")) {
    await counted(c, proceed);
    return false;
  }
  if (parseInt(length || "0", 10) > maxBytes) throw tooLarge(maxBytes);
  return true;
}

/** The size rule's second half: the body read once, as text (hono caches it for the validator). */
async function textWithin(c: Context<AppEnv>, maxBytes: number) {
  let text: string | undefined;
  try {
    text = await c.req.text();
  } catch {
    // A body that cannot be read is the validator's to refuse, as it always was.
  }
  if (text !== undefined && textOverBytes(text, maxBytes)) throw tooLarge(maxBytes);
}

/**
 * A route's own, smaller limit on its JSON bodies, under the /v1 rule (`requestRules`, which has
 * already refused what is not JSON): the same rule, so a short Content-Length does not let a
 * longer body through either.
 */
export function limitBodies(maxBytes: number): MiddlewareHandler<AppEnv> {
  const counted = countedLimit(maxBytes);
  return async (c, next) => {
    if (await declaredWithin(c, maxBytes, counted)) await textWithin(c, maxBytes);
    return next();
  };
}

/**
 * Routes whose body is raw bytes, not JSON (an image's upload parts): the JSON body rules and the
 * 1 MiB limit do not apply; `rawBodies` takes their place.
 */
const RAW_BODY_ROUTES: { method: string; path: RegExp }[] = [
  { method: "PUT", path: /^\/v1\/images\/[^/]+\/parts\/[^/]+$/ },
];
const isRawBodyRoute = (method: string, path: string) =>
  RAW_BODY_ROUTES.some((r) => r.method === method && r.path.test(path));

/**
 * A raw-body route's body: application/octet-stream, uncompressed, with a Content-Length (the
 * bytes stream through, so their number is known before they are read) of at most `maxBytes`.
 */
function requireRawBody(c: Context<AppEnv>, maxBytes: number) {
  const encoding = bodyClaimProblem(c.req.raw.headers);
  if (encoding?.code === "unsupported_content_encoding")
    throw new DomainError(encoding.code, encoding.message, encoding.details);
  const type = c.req.header("Content-Type");
  if (!type || !/^application\/octet-stream\s*(;|$)/i.test(type)) {
    throw new DomainError("unsupported_media_type", "send the bytes with Content-Type: application/octet-stream");
  }
  const length = Number(c.req.header("Content-Length") ?? NaN);
  if (!Number.isSafeInteger(length))
    throw new DomainError(
      "invalid_header",
      "send a Content-Length: the bytes stream through and are counted against it",
    );
  if (length > maxBytes) throw new DomainError("payload_too_large", `a part is at most ${maxBytes} bytes`);
}

export interface RequestRules {
  /** The JSON body limit. */
  maxBodyBytes: number;
  /** A raw-body route's limit (an image's part). */
  maxPartBytes: number;
  /** Paths whose route checks its own bytes (an agent build): no body rule here. */
  exempt: (path: string) => boolean;
  /** The query rule (./query.ts), run once the body rules passed. */
  checkQuery: (c: Context<AppEnv>) => void;
}

/**
 * Every /v1 request's rules in one middleware, in the order they always ran: the body's size
 * (413 before anything reads it), its claims (coding, type, charset: 415), then the query (400).
 * A raw-body route takes `requireRawBody` instead of the JSON rules. One closure rather than one
 * per rule, since this runs in front of every host report and poll.
 *
 * The size: a body with a Content-Length (and no Transfer-Encoding) is refused by that number
 * before it is read, and a JSON body is then read once, as text (the validator parses that same
 * text, hono caching it), and refused if it turns out longer than its limit after all; a body of
 * unknown length is counted as it streams in (hono's bodyLimit), never held whole past the limit.
 */
export function requestRules(rules: RequestRules): MiddlewareHandler<AppEnv> {
  const { maxBodyBytes, maxPartBytes, exempt, checkQuery } = rules;
  const counted = countedLimit(maxBodyBytes);
  return async (c, next) => {
    const path = c.req.path;
    if (isRawBodyRoute(c.req.method, path)) requireRawBody(c, maxPartBytes);
    else if (!exempt(path)) {
      // Size first (413 before anything reads the body), then its claims (415), then the text.
      const declared = await declaredWithin(c, maxBodyBytes, counted);
      if (requireJsonBody(c) && declared) await textWithin(c, maxBodyBytes);
    }
    checkQuery(c);
    return next();
  };
}
