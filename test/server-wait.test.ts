import { describe, expect, it } from "vitest";
import { call, createFleet, registerServer, report } from "./helpers";

async function realizedServer() {
  const fleet = await createFleet();
  const s = await registerServer(fleet.id);
  await call("PUT", `/v1/servers/${s.id}/desired`, {
    body: { generation: 2, agents: [{ name: "logs", image: "logs:1", version: "1" }] },
  });
  return s;
}

describe("GET /v1/servers/{id} for operators: ETag and long poll", () => {
  it("tags the view; the same tag answers 304 until a report changes the status", async () => {
    const s = await realizedServer();
    const first = await call("GET", `/v1/servers/${s.id}`);
    const tag = first.headers.get("ETag")!;
    expect(tag).toMatch(/^W\/"[0-9a-z]+"$/);
    expect((await call("GET", `/v1/servers/${s.id}`, { headers: { "If-None-Match": tag } })).status).toBe(304);
    await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(2, [{ name: "logs", image: "logs:1" }]) });
    const after = await call("GET", `/v1/servers/${s.id}`, { headers: { "If-None-Match": tag } });
    expect(after.status).toBe(200);
    expect(after.json.status).toBe("realized");
    expect(after.headers.get("ETag")).not.toBe(tag);
  });

  it("a waiting request answers as soon as a report realizes the server", async () => {
    const s = await realizedServer();
    const tag = (await call("GET", `/v1/servers/${s.id}`)).headers.get("ETag")!;
    const started = Date.now();
    const parked = call("GET", `/v1/servers/${s.id}?wait=30`, { headers: { "If-None-Match": tag } });
    await new Promise((r) => setTimeout(r, 300));
    await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(2, [{ name: "logs", image: "logs:1" }]) });
    const res = await parked;
    expect(res.status).toBe(200);
    expect(res.json.status).toBe("realized");
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(res.headers.get("ETag")).not.toBe(tag);
  });

  it("answers 304 with the same tag when the wait runs out, and a heartbeat does not end the wait", async () => {
    const s = await realizedServer();
    await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(2, [{ name: "logs", image: "logs:1" }]) });
    const tag = (await call("GET", `/v1/servers/${s.id}`)).headers.get("ETag")!;
    const started = Date.now();
    const parked = call("GET", `/v1/servers/${s.id}?wait=2`, { headers: { "If-None-Match": tag } });
    await new Promise((r) => setTimeout(r, 300));
    // The same report again: only its timestamps move.
    await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(2, [{ name: "logs", image: "logs:1" }]) });
    const res = await parked;
    expect(res.status).toBe(304);
    expect(res.headers.get("ETag")).toBe(tag);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1_900);
  });

  it("a tag without W/ is understood, and a stale tag answers at once", async () => {
    const s = await realizedServer();
    const tag = (await call("GET", `/v1/servers/${s.id}`)).headers.get("ETag")!;
    const strong = tag.replace(/^W\//, "");
    expect((await call("GET", `/v1/servers/${s.id}`, { headers: { "If-None-Match": strong } })).status).toBe(304);
    const started = Date.now();
    const res = await call("GET", `/v1/servers/${s.id}?wait=20`, { headers: { "If-None-Match": 'W/"old"' } });
    expect(res.status).toBe(200);
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it("refuses a wait over 60 s and answers 404 for an unknown server, waiting or not", async () => {
    const s = await realizedServer();
    const bad = await call("GET", `/v1/servers/${s.id}?wait=61`, { headers: { "If-None-Match": 'W/"x"' } });
    expect(bad.status).toBe(400);
    expect(bad.json.error.code).toBe("invalid_query");
    const unknown = crypto.randomUUID();
    expect((await call("GET", `/v1/servers/${unknown}?wait=1`, { headers: { "If-None-Match": 'W/"x"' } })).status).toBe(
      404,
    );
    expect((await call("GET", `/v1/servers/${unknown}`)).status).toBe(404);
  });
});
