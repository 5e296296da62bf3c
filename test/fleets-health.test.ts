/**
 * GET /v1/status/fleets: `hm fleets` in one request a page, every fleet of the page counted (the
 * fleets list's order and cursor), and only the fleets a token may see.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { call, createFleet, registerServer, uniq } from "./helpers";

describe("GET /v1/status/fleets", () => {
  it("pages the fleets with their settings and health, past the first 50, each fleet counted", async () => {
    const prefix = uniq("fh");
    const ids = Array.from({ length: 53 }, (_, i) => `${prefix}-${String(i).padStart(2, "0")}`);
    for (const id of ids) await createFleet({ id });
    const sick = ids[51];
    const a = await registerServer(sick);
    await registerServer(sick);
    await registerServer(ids[52]);
    await env.DB.prepare("UPDATE servers SET status = 'failed' WHERE id = ?").bind(a.id).run();

    const seen = new Map<string, any>();
    let cursor: string | null = null;
    let pages = 0;
    do {
      const res = await call("GET", `/v1/status/fleets${cursor ? `?cursor=${cursor}` : ""}`);
      expect(res.status).toBe(200);
      expect(res.json.items.length).toBeLessThanOrEqual(50);
      for (const f of res.json.items) seen.set(f.id, f);
      cursor = res.json.next_cursor;
      pages++;
    } while (cursor && pages < 100);
    for (const id of ids) expect(seen.has(id), id).toBe(true);
    expect(seen.get(sick)).toMatchObject({
      stale_after_s: expect.any(Number),
      servers: { total: 2, by_status: { failed: 1, unknown: 1 } },
      needs_look: 1,
      stuck_reboots: 0,
      rollouts_running: 0,
      health: "needs_look",
    });
    expect(seen.get(ids[52])).toMatchObject({ servers: { total: 1 }, health: "ok" });
    expect(seen.get(ids[0])).toMatchObject({ servers: { total: 0, by_status: {} }, health: "empty" });
  });

  it("shows a token limited to fleets only those, and refuses a bad cursor or limit", async () => {
    const mine = (await createFleet()).id;
    await createFleet();
    const token = await call("POST", "/v1/tokens", { body: { name: uniq("one"), scope: "read", fleets: [mine] } });
    expect(token.status).toBe(201);
    const res = await call("GET", "/v1/status/fleets", { token: token.json.token });
    expect(res.json.items.map((f: { id: string }) => f.id)).toEqual([mine]);
    expect((await call("GET", "/v1/status/fleets?limit=51")).status).toBe(400);
    expect((await call("GET", "/v1/status/fleets?cursor=nope")).status).toBe(400);
  });
});
