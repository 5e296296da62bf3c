import { describe, expect, it } from "vitest";
import { call, createFleet, registerServer } from "./helpers";

describe("smoke", () => {
  it("serves healthz and registers a server", async () => {
    expect((await call("GET", "/healthz", { token: null })).status).toBe(200);
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    expect(s.desired.generation).toBe(1);
    const got = await call("GET", `/v1/servers/${s.id}`);
    expect(got.status).toBe(200);
    expect(got.json.status).toBe("unknown");
  });
});
