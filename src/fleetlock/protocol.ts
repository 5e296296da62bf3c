/**
 * The FleetLock wire protocol as Zincati speaks it (coreos/zincati docs/development/fleetlock/
 * protocol.md): a JSON body read from the raw bytes whatever the Content-Type (Zincati sends
 * none, pretty-printed), and failures as `{kind, value}` with `kind` from a small fixed set,
 * because Zincati turns it into a metric label.
 */
import type { z } from "@hono/zod-openapi";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import type { FleetLockKind } from "../domain/enums";
import { ClientParamsBody } from "./schemas";

export type { FleetLockKind } from "../domain/enums";

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
  operator_hold: 409,
  fleet_unhealthy: 409,
  rollout_running: 409,
  reboots_unhealthy: 409,
  external_check_failed: 409,
  budget_exhausted: 409,
  not_found: 404,
  method_not_allowed: 405,
  internal_error: 500,
} as const satisfies Record<FleetLockKind, ContentfulStatusCode>;

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

export type ClientParams = z.output<typeof ClientParamsBody>["client_params"];

/**
 * Parses the raw body with ClientParamsBody, the schema the OpenAPI document shows, so the
 * document and the parser cannot disagree. Unknown fields are ignored (the protocol may grow);
 * `group` defaults to "default", as Zincati's own default.
 */
export function parseClientParams(raw: string): ClientParams | FleetLockFailure {
  let body: unknown;
  try {
    body = JSON.parse(raw);
  } catch {
    return failure("invalid_client_params", 'the body is not JSON; send {"client_params":{"id":…,"group":…}}');
  }
  const parsed = ClientParamsBody.safeParse(body);
  if (parsed.success) return parsed.data.client_params;
  const issue = parsed.error.issues[0];
  const where = issue.path.length ? issue.path.join(".") : "body";
  return failure("invalid_client_params", `${where}: ${issue.message}`);
}

/** A fleet's FleetLock key as `randomSecret()` makes it: 32 bytes, base64url. */
export const FLEETLOCK_KEY = /^[A-Za-z0-9_-]{43}$/;
