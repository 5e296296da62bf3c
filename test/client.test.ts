import { SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { createClient, errorOf } from "../src/client";
import { ADMIN, BASE } from "./helpers";

const viaWorker = (token?: string | null) =>
  createClient(BASE, token, { fetch: (input: RequestInfo | URL, init?: RequestInit) => SELF.fetch(input, init) });

describe("the typed client (hono hc over AppType)", () => {
  it("registers a fleet and a server, and the host reads its desired config, all typed end to end", async () => {
    const admin = viaWorker(ADMIN);
    const fleet = `client-${crypto.randomUUID().slice(0, 8)}`;
    const created = await admin.v1.fleets.$post({ json: { id: fleet } });
    expect(created.status).toBe(201);
    const server = await admin.v1.servers.$post({ json: { fleet, hostname: "typed.example.com", kind: "managed" } });
    expect(server.status).toBe(201);
    if (server.status !== 201) throw new Error("unreachable");
    const { id, token } = await server.json();

    const detail = await admin.v1.servers[":id"].$get({ param: { id } });
    expect(detail.status).toBe(200);
    if (detail.status !== 200) throw new Error("unreachable");
    expect((await detail.json()).status).toBe("unknown");

    const host = viaWorker(token);
    const desired = await host.v1.agent.desired.$get({ query: {}, header: {} });
    expect(desired.status).toBe(200);
    expect(desired.headers.get("ETag")).toBe('"1"');

    const list = await admin.v1.servers.$get({ query: { fleet } });
    if (list.status !== 200) throw new Error(`list: ${list.status}`);
    expect((await list.json()).items.map((s) => s.id)).toEqual([id]);
  });

  it("exposes error answers with their code", async () => {
    const res = await viaWorker(null).v1.fleets.$get({ query: {} });
    expect(res.status).toBe(401);
    expect((await errorOf(res))?.code).toBe("unauthorized");
  });
});
