import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { locationOfCreated } from "../http/location";
import {
  bearer,
  commonErrors,
  conflictError,
  createdResponse,
  jsonBody,
  jsonResponse,
  notFoundError,
} from "../http/openapi";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { iso } from "../lib/time";
import { requireScope } from "../auth/principal";
import { CliExchange, CliStart, SpecSsoMapping, SsoMapping, SsoMappingInput, SsoSession } from "./schemas";
import { exchangeCliCode, startLogin } from "./logins";
import { oidcConfig } from "./oidc";
import { DomainError } from "../domain/errors";
import { activeSessions, createMapping, deleteMapping, endSsoSession, listMappings, listSpecMappings } from "./service";
import type { SsoMappingRow } from "./store";

const mappingView = (r: SsoMappingRow): z.input<typeof SsoMapping> => ({
  id: r.id,
  kind: r.kind,
  value: r.value,
  scope: r.scope,
  fleets: r.fleets,
  description: r.description,
  created_by: r.createdBy,
  created_at: iso(r.createdAt),
});

const SESSIONS_SHOWN = 500;

// One chain, so the app's type carries every route for hc.
export const ssoRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook })
  .openapi(
    createRoute({
      method: "get",
      path: "/mappings",
      operationId: "listSsoMappings",
      tags: ["sso"],
      summary: "Who gets what through SSO: email or group → scope and fleets",
      description:
        "`items`: the mappings made here (hm sso mappings add); `from_specs`: the rows of fleet specs' access sections, " +
        "each on its own fleet only, managed by applying the spec. Both only within the admin's fleets.",
      security: bearer,
      middleware: [requireScope("admin")] as const,
      responses: {
        200: jsonResponse(
          z.object({ items: z.array(SsoMapping), from_specs: z.array(SpecSsoMapping) }),
          "Every mapping the admin may see",
        ),
        ...commonErrors,
      },
    }),
    async (c) => {
      const [items, specs] = await Promise.all([
        listMappings(c.env, c.var.principal),
        listSpecMappings(c.env, c.var.principal),
      ]);
      return c.json(
        {
          items: items.map(mappingView),
          from_specs: specs.map((r) => ({ fleet: r.fleetId, kind: r.kind, value: r.value, scope: r.scope })),
        },
        200,
      );
    },
  )
  .openapi(
    createRoute({
      method: "post",
      path: "/mappings",
      operationId: "createSsoMapping",
      tags: ["sso"],
      summary: "Map an email or a group to a scope on some fleets",
      security: bearer,
      middleware: [requireScope("admin"), locationOfCreated] as const,
      request: { body: jsonBody(SsoMappingInput) },
      responses: {
        201: createdResponse(SsoMapping, "The mapping"),
        ...commonErrors,
        ...conflictError("A mapping for that email or group exists"),
      },
    }),
    async (c) => {
      const row = await createMapping(c.env, c.var.principal, c.req.valid("json"));
      return c.json(mappingView(row), 201);
    },
  )
  .openapi(
    createRoute({
      method: "delete",
      path: "/mappings/{id}",
      operationId: "deleteSsoMapping",
      tags: ["sso"],
      summary: "Remove a mapping; sessions already minted keep their grant until they end",
      security: bearer,
      middleware: [requireScope("admin")] as const,
      request: { params: z.object({ id: z.uuid() }) },
      responses: { 200: jsonResponse(SsoMapping, "The removed mapping"), ...commonErrors, ...notFoundError },
    }),
    async (c) => {
      const row = await deleteMapping(c.env, c.var.principal, c.req.valid("param").id);
      return c.json(mappingView(row), 200);
    },
  )
  .openapi(
    createRoute({
      method: "get",
      path: "/sessions",
      operationId: "listSsoSessions",
      tags: ["sso"],
      summary: "The active SSO sessions (console and hm), newest first",
      security: bearer,
      middleware: [requireScope("admin")] as const,
      responses: { 200: jsonResponse(z.object({ items: z.array(SsoSession) }), "Active sessions"), ...commonErrors },
    }),
    async (c) => {
      const rows = await activeSessions(c.env, c.var.principal, SESSIONS_SHOWN);
      const items = rows.map((r) => ({
        token_id: r.s.tokenId,
        provider: r.s.provider,
        subject: r.s.subject,
        email: r.s.email,
        client: r.s.client,
        scope: r.scope === "server" ? ("read" as const) : r.scope,
        fleets: r.fleets,
        created_at: iso(r.s.createdAt),
        expires_at: iso(r.s.expiresAt),
      }));
      return c.json({ items }, 200);
    },
  )
  .openapi(
    createRoute({
      method: "delete",
      path: "/sessions/{token_id}",
      operationId: "endSsoSession",
      tags: ["sso"],
      summary: "End a session: its token is revoked, its console pages and live sockets close",
      security: bearer,
      middleware: [requireScope("admin")] as const,
      request: { params: z.object({ token_id: z.uuid() }) },
      responses: {
        200: jsonResponse(z.object({ token_id: z.string(), ended_at: z.string() }), "Ended"),
        ...commonErrors,
        ...notFoundError,
      },
    }),
    async (c) => {
      const { token } = await endSsoSession(c.env, c.var.principal, c.req.valid("param").token_id);
      return c.json({ token_id: token.id, ended_at: iso(token.revokedAt ?? Date.now()) }, 200);
    },
  )
  .openapi(
    createRoute({
      method: "post",
      path: "/cli/start",
      operationId: "startCliSignIn",
      tags: ["sso"],
      summary: "hm login --sso: the provider's URL for the browser; it comes back to hm's loopback listener",
      description: "Unauthenticated: it is how a user without a token gets one.",
      security: [],
      request: { body: jsonBody(CliStart) },
      responses: {
        200: jsonResponse(z.object({ url: z.string() }), "Where to send the browser"),
        ...commonErrors,
        ...notFoundError,
      },
    }),
    async (c) => {
      const config = oidcConfig(c.env);
      if (!config) throw new DomainError("not_found", "OpenID Connect sign-in is not configured on this deployment");
      const input = c.req.valid("json");
      const url = await startLogin(c.env, config, {
        origin: new URL(c.req.url).origin,
        client: "cli",
        returnTo: input.redirect_uri,
        cliChallenge: input.code_challenge,
      });
      return c.json({ url }, 200);
    },
  )
  .openapi(
    createRoute({
      method: "post",
      path: "/cli/exchange",
      operationId: "exchangeCliSignIn",
      tags: ["sso"],
      summary: "hm login --sso: the one-time code and hm's verifier for a short-lived operator token",
      description: "Unauthenticated: the one-time code and the PKCE verifier are the proof.",
      security: [],
      request: { body: jsonBody(CliExchange) },
      responses: {
        200: jsonResponse(
          z.object({
            token: z.string(),
            token_id: z.string(),
            scope: z.enum(["read", "write", "admin"]),
            fleets: z.union([z.literal("*"), z.array(z.string())]),
            expires_at: z.string(),
          }),
          "The session's token",
        ),
        ...commonErrors,
      },
    }),
    async (c) => {
      const input = c.req.valid("json");
      const s = await exchangeCliCode(c.env, { code: input.code, verifier: input.code_verifier });
      return c.json(
        { token: s.token, token_id: s.id, scope: s.scope, fleets: s.fleets, expires_at: iso(s.expiresAt) },
        200,
      );
    },
  );
