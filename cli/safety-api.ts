/**
 * The reboot-safety calls of hm (docs/reboot-safety.md): health gates, holds and webhooks, over the same typed
 * client as ./api.ts, with failures as ApiError.
 */
import type { ClientResponse } from "hono/client";
import { createClient, type Client } from "../src/client/index.ts";
import { apiErrorOf, type FetchLike } from "../agent/http.ts";

type Success<R> =
  R extends ClientResponse<infer T, infer S, infer _F> ? (S extends 200 | 201 | 202 ? T : never) : never;

async function ok<R extends ClientResponse<unknown, number, any>>(pending: Promise<R>): Promise<Success<R>> {
  const res = await pending;
  if (!res.ok) throw await apiErrorOf(res as unknown as Response);
  return (await res.json()) as Success<R>;
}

type Fleets = Client["v1"]["fleets"][":fleet"];
export type GateConfig = Parameters<Fleets["gates"]["$put"]>[0]["json"];
export type HoldInput = Parameters<Fleets["hold"]["$put"]>[0]["json"];
export type WebhookInput = Parameters<Fleets["webhooks"]["$post"]>[0]["json"];

export function safetyApi(conn: { url: string; token: string }, fetchImpl: FetchLike) {
  const c = createClient(conn.url.replace(/\/+$/, ""), conn.token, {
    fetch: (i: string | URL | Request, init?: RequestInit) => fetchImpl(i as string, init),
  });
  const f = c.v1.fleets[":fleet"];
  return {
    gates: (fleet: string) => ok(f.gates.$get({ param: { fleet } })),
    putGates: (fleet: string, json: GateConfig) => ok(f.gates.$put({ param: { fleet }, json })),
    holdFleet: (fleet: string, json: HoldInput) => ok(f.hold.$put({ param: { fleet }, json })),
    unholdFleet: (fleet: string) => ok(f.hold.$delete({ param: { fleet } })),
    holdGroup: (fleet: string, group: string, json: HoldInput) =>
      ok(f["reboot-groups"][":group"].hold.$put({ param: { fleet, group }, json })),
    unholdGroup: (fleet: string, group: string) =>
      ok(f["reboot-groups"][":group"].hold.$delete({ param: { fleet, group } })),
    dequeue: (fleet: string, group: string, id: string) =>
      ok(f["reboot-groups"][":group"].queue[":id"].$delete({ param: { fleet, group, id } })),
    webhooks: (fleet: string) => ok(f.webhooks.$get({ param: { fleet } })),
    createWebhook: (fleet: string, json: WebhookInput) => ok(f.webhooks.$post({ param: { fleet }, json })),
    deleteWebhook: (fleet: string, id: string) => ok(f.webhooks[":id"].$delete({ param: { fleet, id } })),
    deliveries: (fleet: string, id: string, limit = 50) =>
      ok(f.webhooks[":id"].deliveries.$get({ param: { fleet, id }, query: { limit: String(limit) } })),
    delivery: (fleet: string, id: string, delivery: string) =>
      ok(f.webhooks[":id"].deliveries[":delivery"].$get({ param: { fleet, id, delivery } })),
    testWebhook: (fleet: string, id: string) => ok(f.webhooks[":id"].test.$post({ param: { fleet, id } })),
  };
}
