import { describe, expect, it } from "vitest";
import { parseIfNoneMatch } from "../src/http/conditional";
import { call, createFleet, registerServer } from "./helpers";

describe("GET /v1/agent/desired", () => {
  it("returns the token's server config with the generation in the ETag, then 304 for that ETag", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const first = await call("GET", "/v1/agent/desired", { token: s.token });
    expect(first.status).toBe(200);
    expect(first.json).toEqual({ server_id: s.id, generation: 1, agents: [], lifecycle: "run" });
    expect(first.headers.get("ETag")).toBe('"1"');

    const cached = await call("GET", "/v1/agent/desired", { token: s.token, headers: { "If-None-Match": '"1"' } });
    expect(cached.status).toBe(304);
    expect(cached.headers.get("ETag")).toBe('"1"');

    await call("PUT", `/v1/servers/${s.id}/desired`, {
      body: { generation: 2, agents: [{ name: "logs", image: "logs:1", version: "1" }] },
    });
    const changed = await call("GET", "/v1/agent/desired", { token: s.token, headers: { "If-None-Match": '"1"' } });
    expect(changed.status).toBe(200);
    expect(changed.json.generation).toBe(2);
    expect(changed.headers.get("ETag")).toBe('"2"');
  });

  it("long-polls: a parked request wakes as soon as a new generation is written", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const started = Date.now();
    const parked = call("GET", "/v1/agent/desired?wait=30", { token: s.token, headers: { "If-None-Match": '"1"' } });
    await new Promise((r) => setTimeout(r, 200));
    await call("PUT", `/v1/servers/${s.id}/desired`, {
      body: { generation: 2, agents: [{ name: "logs", image: "logs:2", version: "2" }] },
    });
    const res = await parked;
    expect(res.status).toBe(200);
    expect(res.json.generation).toBe(2);
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it("long-polls: answers 304 when the wait runs out with nothing new", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const started = Date.now();
    const res = await call("GET", "/v1/agent/desired?wait=1", { token: s.token, headers: { "If-None-Match": '"1"' } });
    expect(res.status).toBe(304);
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
  });

  it("refuses waits over 60 seconds", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const res = await call("GET", "/v1/agent/desired?wait=61", { token: s.token });
    expect(res.status).toBe(400);
    expect(res.json.error.code).toBe("invalid_query");
  });

  it("reads generations from strong, weak and listed entity tags, and * as any", () => {
    expect(parseIfNoneMatch('"7"')).toEqual({ any: false, generations: [7] });
    expect(parseIfNoneMatch('W/"8"')).toEqual({ any: false, generations: [8] });
    expect(parseIfNoneMatch('"x", "9", W/"3"')).toEqual({ any: false, generations: [9, 3] });
    expect(parseIfNoneMatch("*")).toEqual({ any: true });
    expect(parseIfNoneMatch(undefined)).toBeNull();
  });
});
