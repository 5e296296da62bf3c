import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { createMiddleware } from "hono/factory";
import { requireScope } from "../auth/principal";
import { tokenActorNames } from "../auth/store";
import { getDb } from "../db/client";
import type { Env } from "../env";
import { actorOf, fleetAllowed, visibleFleets } from "../domain/principal";
import { fleetId } from "../model/fleet";
import { locationOfCreated } from "../http/location";
import {
  bearer,
  commonErrors,
  conflictError,
  createdResponse,
  jsonBody,
  jsonResponse,
  notFoundError,
  unprocessableError,
} from "../http/openapi";
import { DomainError, unknownFleet } from "../domain/errors";
import {
  cursorParam,
  decodeCursor,
  decodeIdCursor,
  encodeCursor,
  limitParam,
  page,
  decimalParam,
} from "../http/paging";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { agentName } from "../model/server/schemas";
import { eventView, listItem, targetView, view } from "./answers";
import {
  controlRollout,
  createRollout,
  endRolloutTarget,
  getRollout,
  listRollouts,
  refuseHiddenRollout,
  rolloutEvents,
  rolloutTargets,
} from "./service";
import { ROLLOUT_STATES, TARGET_STATES, type Control } from "./machine";
import type { RolloutSummary } from "./views";
import {
  EndTargetInput,
  EventSchema,
  MAX_ROLLOUT_WAIT_S,
  RolloutInput,
  RolloutListItem,
  RolloutSchema,
  TargetSchema,
} from "./schemas";

const idParam = z.object({ id: z.uuid() });

/** A rollout as answered, with the name of the token that started it (one D1 read). */
const named = async (env: Env, s: RolloutSummary) => view(s, await tokenActorNames(getDb(env.DB), [s.created_by]));

/** After the scope: a rollout of a fleet the token may not see is answered as a missing one. */
const rolloutInReach = createMiddleware<AppEnv>(async (c, next) => {
  await refuseHiddenRollout(c.env, c.var.principal, c.req.param("id") ?? "");
  await next();
});

/** pause | resume | cancel | rollback share one shape. */
const controlRoute = <A extends Control>(action: A) =>
  createRoute({
    method: "post",
    path: `/{id}/${action}` as `/{id}/${A}`,
    operationId: `${action === "rollback" ? "rollBack" : action}Rollout`,
    tags: ["rollouts"],
    summary: {
      pause: "Pause: no new target starts; those applying finish",
      resume: "Resume a paused rollout (or rollback)",
      cancel: "Cancel: queued targets become skipped; those applying finish",
      rollback: "Roll back: the done targets go back to the image each had before, as a new pass with the same rules",
    }[action],
    security: bearer,
    middleware: [requireScope("write"), rolloutInReach] as const,
    request: { params: idParam },
    responses: {
      200: jsonResponse(RolloutSchema, "The rollout as it now is"),
      ...commonErrors,
      ...notFoundError,
      ...conflictError(
        "Not allowed in the rollout's state (invalid_state), or another rollout holds the agent (rollout_in_progress)",
      ),
    },
  });

// One chain, so the type of this router (and of the app that mounts it at /v1/rollouts) carries every route for hc.
export const rolloutRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook })
  .openapi(
    createRoute({
      method: "post",
      path: "/",
      operationId: "createRollout",
      tags: ["rollouts"],
      summary: "Start a rollout of one agent's image across the fleet's servers that run it",
      description:
        "Targets are the servers of the fleet whose desired config has the agent, narrowed by `selector` " +
        "(roles, labels, server ids or hostnames); `exclude` (ids or hostnames) lists them as skipped. One running rollout per " +
        "(fleet, agent): 409 rollout_in_progress names it. The same request sent again by the same principal while its " +
        "rollout holds the pair (a lost answer, or a start cut off after its claim) answers that rollout, started once. " +
        "A rollout with no target is refused (422 no_targets) unless " +
        "`channel_only` asks for a move of the fleet's channel alone. Every target has a deadline (`server_timeout_s`, " +
        "default 3600).",
      security: bearer,
      middleware: [requireScope("write"), locationOfCreated] as const,
      request: { body: jsonBody(RolloutInput) },
      responses: {
        201: createdResponse(RolloutSchema, "Started"),
        ...commonErrors,
        ...conflictError("Another rollout of this agent is running in the fleet (rollout_in_progress)"),
        ...unprocessableError(
          "Unknown fleet; no server to write (no_targets: names the fleet's agents; channel_only asks for a channel move alone); " +
            "a selector or exclude entry that is no server of the fleet (unknown_server)",
        ),
      },
    }),
    async (c) => {
      const input = c.req.valid("json");
      // Exactly what creation answers for a fleet that does not exist.
      if (!fleetAllowed(c.var.principal, input.fleet)) throw unknownFleet(input.fleet);
      return c.json(await named(c.env, await createRollout(c.env, actorOf(c.var.principal), input)), 201);
    },
  )
  .openapi(
    createRoute({
      method: "get",
      path: "/",
      operationId: "listRollouts",
      tags: ["rollouts"],
      summary: "Rollouts, newest first, from the index",
      security: bearer,
      middleware: [requireScope("read")] as const,
      request: {
        query: z.object({
          fleet: fleetId.optional(),
          agent: agentName.optional(),
          state: z.enum(ROLLOUT_STATES).optional(),
          limit: limitParam,
          cursor: cursorParam,
        }),
      },
      responses: {
        200: jsonResponse(z.object({ items: z.array(RolloutListItem), next_cursor: z.string().nullable() }), "A page"),
        ...commonErrors,
      },
    }),
    async (c) => {
      const q = c.req.valid("query");
      const key = decodeCursor(q.cursor, 2);
      const before = key ? { createdAt: Number(key[0]), id: key[1] } : null;
      if (before && !Number.isSafeInteger(before.createdAt))
        throw new DomainError("invalid_cursor", "cursor is not one this API issued");
      const rows = await listRollouts(
        c.env,
        { fleet: q.fleet, agent: q.agent, state: q.state, visible: visibleFleets(c.var.principal) },
        before,
        q.limit,
      );
      const { items, next_cursor } = page(rows, q.limit, (r) => [String(r.createdAt), r.id]);
      const names = await tokenActorNames(
        getDb(c.env.DB),
        items.map((r) => r.createdBy),
      );
      return c.json({ items: items.map((r) => listItem(r, names)), next_cursor }, 200);
    },
  )
  .openapi(
    createRoute({
      method: "get",
      path: "/{id}",
      operationId: "getRollout",
      tags: ["rollouts"],
      summary: "One rollout: counts by state, median, ETA, warnings",
      description:
        "With `wait` (seconds, at most 60) the answer waits for the rollout's next change: after the " +
        "change `since` names (the `change` of an earlier answer), or after this request arrived.",
      security: bearer,
      middleware: [requireScope("read"), rolloutInReach] as const,
      request: {
        params: idParam,
        query: z.object({
          wait: decimalParam(0, MAX_ROLLOUT_WAIT_S).default(0),
          since: decimalParam(0, Number.MAX_SAFE_INTEGER).optional(),
        }),
      },
      responses: { 200: jsonResponse(RolloutSchema, "The rollout"), ...commonErrors, ...notFoundError },
    }),
    async (c) => {
      const { id } = c.req.valid("param");
      const q = c.req.valid("query");
      return c.json(
        await named(
          c.env,
          await getRollout(c.env, id, { since: q.since ?? null, waitMs: q.wait * 1000, signal: c.req.raw.signal }),
        ),
        200,
      );
    },
  )
  .openapi(controlRoute("pause"), async (c) => {
    const { id } = c.req.valid("param");
    return c.json(await named(c.env, await controlRollout(c.env, actorOf(c.var.principal), id, "pause")), 200);
  })
  .openapi(controlRoute("resume"), async (c) => {
    const { id } = c.req.valid("param");
    return c.json(await named(c.env, await controlRollout(c.env, actorOf(c.var.principal), id, "resume")), 200);
  })
  .openapi(controlRoute("cancel"), async (c) => {
    const { id } = c.req.valid("param");
    return c.json(await named(c.env, await controlRollout(c.env, actorOf(c.var.principal), id, "cancel")), 200);
  })
  .openapi(controlRoute("rollback"), async (c) => {
    const { id } = c.req.valid("param");
    return c.json(await named(c.env, await controlRollout(c.env, actorOf(c.var.principal), id, "rollback")), 200);
  })
  .openapi(
    createRoute({
      method: "get",
      path: "/{id}/targets",
      operationId: "listRolloutTargets",
      tags: ["rollouts"],
      summary: "The rollout's targets in order, optionally by state (the current pass unless `pass` is given)",
      security: bearer,
      middleware: [requireScope("read"), rolloutInReach] as const,
      request: {
        params: idParam,
        query: z.object({
          state: z.enum(TARGET_STATES).optional(),
          pass: decimalParam(0, 1).optional(),
          limit: limitParam,
          cursor: cursorParam,
        }),
      },
      responses: {
        200: jsonResponse(z.object({ items: z.array(TargetSchema), next_cursor: z.string().nullable() }), "A page"),
        ...commonErrors,
        ...notFoundError,
      },
    }),
    async (c) => {
      const { id } = c.req.valid("param");
      const q = c.req.valid("query");
      const after = decodeIdCursor(q.cursor) ?? -1;
      const rows = await rolloutTargets(c.env, id, { pass: q.pass, state: q.state, after, limit: q.limit });
      const items = rows.slice(0, q.limit).map(targetView);
      const next_cursor = rows.length > q.limit ? encodeCursor([String(rows[q.limit - 1].seq)]) : null;
      return c.json({ items, next_cursor }, 200);
    },
  )
  .openapi(
    createRoute({
      method: "get",
      path: "/{id}/events",
      operationId: "listRolloutEvents",
      tags: ["rollouts"],
      summary: "Everything that happened to the rollout, oldest first (paged)",
      security: bearer,
      middleware: [requireScope("read"), rolloutInReach] as const,
      request: { params: idParam, query: z.object({ limit: limitParam, cursor: cursorParam }) },
      responses: {
        200: jsonResponse(z.object({ items: z.array(EventSchema), next_cursor: z.string().nullable() }), "A page"),
        ...commonErrors,
        ...notFoundError,
      },
    }),
    async (c) => {
      const { id } = c.req.valid("param");
      const q = c.req.valid("query");
      const rows = await rolloutEvents(c.env, id, { after: decodeIdCursor(q.cursor) ?? 0, limit: q.limit });
      const { items, next_cursor } = page(rows, q.limit, (e) => [String(e.id)]);
      const out = items.map(eventView);
      return c.json({ items: out, next_cursor }, 200);
    },
  )
  .openapi(
    createRoute({
      method: "post",
      path: "/{id}/targets/{server}/end",
      operationId: "endRolloutTarget",
      tags: ["rollouts"],
      summary: "End one stuck target (by server id or hostname): queued is skipped, applying is failed",
      description:
        "For a host that will not answer: the rollout stops waiting for it. An applying target becomes `failed` " +
        "(reason `ended by <actor>[: reason]`, counted by the abort rule), a queued one (or one waiting for the " +
        "disruption budget) `skipped`; its reboot slot " +
        "and timer go with it, and a cancelled rollout whose last target ends lets its (fleet, agent) go. Audited.",
      security: bearer,
      middleware: [requireScope("write"), rolloutInReach] as const,
      request: {
        params: z.object({
          id: z.uuid(),
          server: z.string().min(1).max(253).openapi({ description: "server id or hostname" }),
        }),
        body: { required: false, content: { "application/json": { schema: EndTargetInput } } },
      },
      responses: {
        200: jsonResponse(
          z.object({ target: TargetSchema, rollout: RolloutSchema }),
          "The target, ended, and the rollout",
        ),
        ...commonErrors,
        ...notFoundError,
        ...conflictError("The target has already ended (invalid_state)"),
      },
    }),
    async (c) => {
      const { id, server } = c.req.valid("param");
      const body = (c.req.valid("json") as EndTargetInput | undefined) ?? {};
      const out = await endRolloutTarget(c.env, actorOf(c.var.principal), id, server, body.reason);
      return c.json(
        { target: targetView({ ...out.target, duration_ms: null }), rollout: await named(c.env, out.summary) },
        200,
      );
    },
  );
