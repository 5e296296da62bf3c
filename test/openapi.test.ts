import { describe, expect, it } from "vitest";
import { call } from "./helpers";

describe("service endpoints", () => {
  it("serves an OpenAPI 3.1 document generated from the same schemas that validate requests", async () => {
    const res = await call("GET", "/openapi.json", { token: null });
    expect(res.status).toBe(200);
    expect(res.json.openapi).toBe("3.1.0");
    for (const path of [
      "/v1/servers/{id}/desired",
      "/v1/agent/desired",
      "/v1/agent/inventory",
      "/v1/instances",
      "/v1/tokens",
      "/v1/fleets",
    ]) {
      expect(Object.keys(res.json.paths)).toContain(path);
    }
    const schema = res.json.components.schemas.DesiredConfigInput;
    expect(schema.properties.generation).toMatchObject({ type: "integer", minimum: 1 });
    expect(schema.additionalProperties).toBe(false);
  });

  it("answers healthz without a token", async () => {
    expect((await call("GET", "/healthz", { token: null })).json).toEqual({ ok: true });
  });
});
