import { describe, expect, it } from "vitest";
import { call } from "./helpers";

describe("the OpenAPI document", () => {
  it("is the committed openapi.json (CI lints that file with redocly; `npx vitest run -u` refreshes it)", async () => {
    const res = await call("GET", "/openapi.json", { token: null });
    await expect(JSON.stringify(res.json, null, 2) + "\n").toMatchFileSnapshot("../openapi.json");
  });

  it("names every operation, documents X-Request-Id on every answer and states where it is served", async () => {
    const doc = (await call("GET", "/openapi.json", { token: null })).json;
    expect(doc.servers).toEqual([{ url: "/", description: expect.any(String) }]);
    const ids = new Set<string>();
    for (const [path, item] of Object.entries<Record<string, any>>(doc.paths)) {
      for (const [method, op] of Object.entries<any>(item)) {
        expect(op.operationId, `${method} ${path}`).toMatch(/^[a-z][A-Za-z]+$/);
        expect(ids.has(op.operationId), op.operationId).toBe(false);
        ids.add(op.operationId);
        expect(op.security, `${method} ${path}`).toBeDefined();
        for (const [status, response] of Object.entries<any>(op.responses)) {
          expect(response.headers?.["X-Request-Id"], `${method} ${path} ${status}`).toBeDefined();
        }
      }
    }
    expect(ids.size).toBeGreaterThan(25);
  });

  it("describes the coordinator's operator errors with the shared Error body", async () => {
    const doc = (await call("GET", "/openapi.json", { token: null })).json;
    const operator = /^\/v1\/fleets\/\{fleet\}\/(reboot-groups|fix-holds|fleetlock-key)/;
    let seen = 0;
    for (const [path, item] of Object.entries<Record<string, any>>(doc.paths)) {
      if (!operator.test(path)) continue;
      for (const [method, op] of Object.entries<any>(item)) {
        for (const [status, response] of Object.entries<any>(op.responses)) {
          if (Number(status) < 400) continue;
          seen++;
          expect(response.content["application/json"].schema, `${method} ${path} ${status}`).toEqual({
            $ref: "#/components/schemas/Error",
          });
        }
      }
    }
    expect(seen).toBeGreaterThan(10);
  });
});
