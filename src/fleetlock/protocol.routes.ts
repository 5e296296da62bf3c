import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import type { Context } from "hono";
import { bodyLimit } from "hono/body-limit";
import { FLEET_ID } from "../model/fleet";
import { bodyClaimProblem } from "../http/content";
import { logError } from "../http/log";
import type { AppEnv } from "../http/types";
import { sha256Hex } from "../lib/crypto";
import { MAX_FLEETLOCK_BODY_BYTES } from "../domain/limits";
import { FLEETLOCK_KEY, FleetLockError, KIND_STATUS, parseClientParams, type ClientParams } from "./protocol";
import { ClientParamsBody, FleetLockErrorBody } from "./schemas";
import { keyMatches, preReboot, steadyState } from "./service";

/** Mounted at /fleetlock: `{base_url}` is `https://HOST/fleetlock/{fleet}/{key}/`. */
const fleetlock = new OpenAPIHono<AppEnv>();

// The API's 1 MiB limit covers /v1/* only; a FleetLock body is a few dozen bytes.
fleetlock.use(
  "*",
  bodyLimit({
    maxSize: MAX_FLEETLOCK_BODY_BYTES,
    onError: async (c) => {
      // Before the routes' params: the fleet and key are the path's first two segments here.
      const [fleet = "", key = ""] = c.req.path.slice(c.req.path.indexOf("/fleetlock/") + 11).split("/");
      return refuseBody(
        c,
        fleet,
        key,
        new FleetLockError("payload_too_large", `FleetLock bodies are limited to ${MAX_FLEETLOCK_BODY_BYTES} bytes`),
      );
    },
  }),
);

const errorResponses = Object.fromEntries(
  [...new Set(Object.values(KIND_STATUS))].map((status) => [
    status,
    {
      description: `FleetLock error; kind is one of ${Object.entries(KIND_STATUS)
        .filter(([, s]) => s === status)
        .map(([k]) => k)
        .join(", ")}`,
      content: { "application/json": { schema: FleetLockErrorBody } },
    },
  ]),
);

const ops = {
  "pre-reboot": {
    summary: "FleetLock RecursiveLock: take a reboot slot (an id that holds one succeeds again)",
    ok: z.object({ granted: z.literal(true) }),
  },
  "steady-state": {
    summary: "FleetLock UnlockIfHeld: release the id's slot if it holds one; succeeds either way",
    ok: z.object({ released: z.boolean() }),
  },
} as const;

const keyParams = z.object({
  fleet: z.string().regex(FLEET_ID),
  key: z
    .string()
    .regex(FLEETLOCK_KEY)
    .openapi({
      description:
        "The credential: the fleet's FleetLock key (stored hashed; rotated with POST /v1/fleets/{fleet}/fleetlock-key). " +
        "A wrong, rotated or missing key answers 403 `unauthorized`.",
      format: "password",
    }),
});
const groupParams = keyParams.extend({
  group: z
    .string()
    .openapi({ description: "A `${group}` Zincati templated into base_url; must equal the body's group" }),
});

/*
 * Documented with createRoute, but served by a plain handler: the checks run in the protocol's
 * order (header, key, body: a body is refused only to the key's holders) and every failure speaks {kind,value}, and this hot path does no
 * schema work beyond the body's few fields.
 */
for (const op of ["pre-reboot", "steady-state"] as const) {
  for (const templated of [false, true]) {
    const path = templated ? `/{fleet}/{key}/{group}/v1/${op}` : `/{fleet}/{key}/v1/${op}`;
    fleetlock.openAPIRegistry.registerPath(
      createRoute({
        method: "post",
        path,
        operationId: `fleetlock${op === "pre-reboot" ? "PreReboot" : "SteadyState"}${templated ? "InGroupUrl" : ""}`,
        tags: ["fleetlock"],
        // The credential is the fleet's key in the path (`key`): Zincati can send no header of its own,
        // and OpenAPI security schemes cannot name a path segment, so the operation declares none.
        security: [],
        summary: ops[op].summary,
        description:
          "For hosts (Zincati). The body is read from the raw bytes whatever the Content-Type says " +
          "(Zincati sends none) and may be pretty-printed. A full group answers 409 `semaphore_full`.",
        request: {
          params: templated ? groupParams : keyParams,
          headers: z.object({ "fleet-lock-protocol": z.literal("true") }),
          body: { required: true, content: { "*/*": { schema: ClientParamsBody } } },
        },
        responses: {
          200: { description: "Done", content: { "application/json": { schema: ops[op].ok } } },
          ...errorResponses,
        },
      }),
    );
  }
}

/** Recently seen keys and their digests, so a host's every request does not hash its key anew. */
const keyHashes = new Map<string, string>();
const KEY_HASH_CACHE_MAX = 1024;

async function hashOf(key: string) {
  let hash = keyHashes.get(key);
  if (!hash) {
    hash = await sha256Hex(key);
    if (keyHashes.size >= KEY_HASH_CACHE_MAX) keyHashes.clear();
    keyHashes.set(key, hash);
  }
  return hash;
}

/**
 * A body refused only once the key is known to be the fleet's: a wrong key gets the credential
 * error whatever it sent, so the body's faults are told to its holders alone. Only this path asks
 * the coordinator for the key on its own; a good body takes it along with the request.
 */
async function refuseBody(c: Context<AppEnv>, fleet: string, key: string, refusal: FleetLockError): Promise<never> {
  if (!FLEET_ID.test(fleet) || !FLEETLOCK_KEY.test(key)) throw unauthorized();
  // The body is the client's mistake whatever the key: if the coordinator cannot say whether the
  // key is right just now, the answer is still that refusal, never a 500.
  const known = await keyMatches(c.env, fleet, await hashOf(key)).catch(() => true);
  throw known ? refusal : unauthorized();
}

function unauthorized() {
  return new FleetLockError("unauthorized", "invalid FleetLock key for this fleet");
}

/** The request's client_params, read from its raw bytes whatever the Content-Type says. */
async function bodyOf(c: Context<AppEnv>, pathGroup: string | undefined): Promise<ClientParams> {
  // Whatever the Content-Type, the bytes are read as UTF-8: a body declaring a content coding or
  // another charset would be misread, so it is refused (Zincati declares neither).
  const claim = bodyClaimProblem(c.req.raw.headers);
  if (claim) throw new FleetLockError("invalid_client_params", claim.message);
  let text: string;
  try {
    // Bytes, not c.req.text(): the Content-Type is whatever the client sent, often none or a form type.
    text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(await c.req.arrayBuffer());
  } catch (err) {
    if (err instanceof FleetLockError) throw err;
    throw new FleetLockError("invalid_client_params", "the body is not UTF-8 text");
  }
  const params = parseClientParams(text);
  if ("ok" in params) throw new FleetLockError(params.kind, params.value);
  if (pathGroup !== undefined && pathGroup !== params.group) {
    throw new FleetLockError(
      "invalid_client_params",
      `the group in the URL ('${pathGroup}') differs from client_params.group ('${params.group}')`,
    );
  }
  return params;
}

async function handle(c: Context<AppEnv>, op: "pre-reboot"): Promise<{ granted: true }>;
async function handle(c: Context<AppEnv>, op: "steady-state"): Promise<{ released: boolean }>;
async function handle(c: Context<AppEnv>, op: "pre-reboot" | "steady-state") {
  if (c.req.header("fleet-lock-protocol")?.trim().toLowerCase() !== "true") {
    throw new FleetLockError(
      "missing_protocol_header",
      "FleetLock requests must carry the header 'fleet-lock-protocol: true'",
    );
  }
  const { fleet, key, group: pathGroup } = c.req.param() as { fleet: string; key: string; group?: string };
  if (!FLEET_ID.test(fleet) || !FLEETLOCK_KEY.test(key)) {
    throw new FleetLockError("unauthorized", "invalid FleetLock key for this fleet");
  }
  let params: ClientParams;
  try {
    params = await bodyOf(c, pathGroup);
  } catch (err) {
    if (err instanceof FleetLockError) return refuseBody(c, fleet, key, err);
    throw err;
  }
  const keyHash = await hashOf(key);
  if (op === "pre-reboot") {
    const result = await preReboot(c.env, { signal: c.req.raw.signal }, fleet, keyHash, params);
    if (!result.ok) throw new FleetLockError(result.kind, result.value);
    return { granted: true as const };
  }
  const result = await steadyState(c.env, fleet, keyHash, params);
  if (!result.ok) throw new FleetLockError(result.kind, result.value);
  return { released: result.released };
}

fleetlock.onError((err, c) => {
  if (err instanceof FleetLockError) return c.json({ kind: err.kind, value: err.value }, err.status);
  logError(c, err);
  return c.json({ kind: "internal_error", value: "internal error; retry later" }, 500);
});

// One chain, so the app's type carries the FleetLock routes for hc (the simulator plays Zincati).
export const fleetlockRoutes = fleetlock
  .post("/:fleet/:key/v1/pre-reboot", async (c) => c.json(await handle(c, "pre-reboot"), 200))
  .post("/:fleet/:key/:group/v1/pre-reboot", async (c) => c.json(await handle(c, "pre-reboot"), 200))
  .post("/:fleet/:key/v1/steady-state", async (c) => c.json(await handle(c, "steady-state"), 200))
  .post("/:fleet/:key/:group/v1/steady-state", async (c) => c.json(await handle(c, "steady-state"), 200));

// A client that joins base_url and "v1/…" with a "/" of its own (Flatcar's fleetlockctl) sends
// "…/KEY//v1/…" for a base_url with the trailing slash Zincati needs: served the same.
fleetlock
  .post("/:fleet/:key//v1/pre-reboot", async (c) => c.json(await handle(c, "pre-reboot"), 200))
  .post("/:fleet/:key/:group//v1/pre-reboot", async (c) => c.json(await handle(c, "pre-reboot"), 200))
  .post("/:fleet/:key//v1/steady-state", async (c) => c.json(await handle(c, "steady-state"), 200))
  .post("/:fleet/:key/:group//v1/steady-state", async (c) => c.json(await handle(c, "steady-state"), 200));

// Registered after the POST routes, so only other methods reach it.
for (const path of [
  "/:fleet/:key/v1/:op",
  "/:fleet/:key/:group/v1/:op",
  "/:fleet/:key//v1/:op",
  "/:fleet/:key/:group//v1/:op",
]) {
  fleetlock.all(path, (c) => {
    const op = c.req.param("op");
    if (op !== "pre-reboot" && op !== "steady-state") {
      throw new FleetLockError("not_found", `no FleetLock endpoint v1/${op}`);
    }
    c.header("Allow", "POST");
    throw new FleetLockError("method_not_allowed", `v1/${op} takes POST, not ${c.req.method}`);
  });
}
fleetlock.all("/*", (c) => {
  throw new FleetLockError(
    "not_found",
    `no FleetLock endpoint at ${c.req.path}; use {base_url}v1/pre-reboot or v1/steady-state`,
  );
});
