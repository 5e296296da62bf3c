/**
 * The FleetLock wire protocol as Zincati speaks it (coreos/zincati docs/development/fleetlock/
 * protocol.md): a JSON body read from the raw bytes whatever the Content-Type (Zincati sends
 * none, pretty-printed), and failures as `{kind, value}` with `kind` from a small fixed set,
 * because Zincati turns it into a metric label.
 */
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { GROUP_NAME } from "../fleet/schemas";

export const MAX_FLEETLOCK_BODY_BYTES = 16 * 1024;
export const MAX_CLIENT_ID_LENGTH = 256;

/**
 * Every kind this service can answer with, and its status. A full group is 409 Conflict: the
 * request is well-formed and authorized but conflicts with the semaphore's current state and will
 * succeed once that changes; it is not a server fault (5xx would page whoever watches error rates
 * for what is normal back-pressure) nor rate limiting (429). Zincati retries whatever the status.
 */
export const KIND_STATUS = {
  missing_protocol_header: 400,
  invalid_client_params: 400,
  payload_too_large: 413,
  unauthorized: 403,
  unknown_client: 403,
  group_mismatch: 403,
  unknown_group: 404,
  semaphore_full: 409,
  group_paused: 409,
  outside_maintenance_window: 409,
  not_found: 404,
  method_not_allowed: 405,
  internal_error: 500,
} as const satisfies Record<string, ContentfulStatusCode>;

export type FleetLockKind = keyof typeof KIND_STATUS;
export const FLEETLOCK_KINDS = Object.keys(KIND_STATUS) as FleetLockKind[];

export interface FleetLockFailure {
  ok: false;
  kind: FleetLockKind;
  value: string;
}

export const failure = (kind: FleetLockKind, value: string): FleetLockFailure => ({ ok: false, kind, value });

/** Thrown inside the FleetLock routes; rendered by their own error handler, never as `{error}`. */
export class FleetLockError extends Error {
  constructor(
    readonly kind: FleetLockKind,
    readonly value: string,
  ) {
    super(value);
  }
  get status() {
    return KIND_STATUS[this.kind];
  }
}

export interface ClientParams {
  id: string;
  group: string;
}

const GROUP_MAX_LENGTH = 63;

/**
 * Parses `{"client_params":{"id","group"}}` from the raw body. Unknown fields are ignored (the
 * protocol may grow); `group` defaults to "default", as Zincati's own default.
 */
export function parseClientParams(raw: string): ClientParams | FleetLockFailure {
  let body: unknown;
  try {
    body = JSON.parse(raw);
  } catch {
    return failure("invalid_client_params", "the body is not JSON; send {\"client_params\":{\"id\":…,\"group\":…}}");
  }
  const params = isObject(body) ? body.client_params : undefined;
  if (!isObject(params)) return failure("invalid_client_params", "the body has no client_params object");
  const { id, group = "default" } = params;
  if (typeof id !== "string" || id.length === 0) {
    return failure("invalid_client_params", "client_params.id must be a non-empty string");
  }
  if (id.length > MAX_CLIENT_ID_LENGTH) {
    return failure("invalid_client_params", `client_params.id is longer than ${MAX_CLIENT_ID_LENGTH} characters`);
  }
  if (typeof group !== "string" || group.length > GROUP_MAX_LENGTH || !GROUP_NAME.test(group)) {
    return failure(
      "invalid_client_params",
      `client_params.group must match ^[a-zA-Z0-9.-]+$ and be at most ${GROUP_MAX_LENGTH} characters`,
    );
  }
  return { id, group };
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** A fleet's FleetLock key as `randomSecret()` makes it: 32 bytes, base64url. */
export const FLEETLOCK_KEY = /^[A-Za-z0-9_-]{43}$/;
