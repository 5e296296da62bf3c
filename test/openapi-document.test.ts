import { describe, expect, it } from "vitest";
import { BASE, call, checkedFetch, createFleet } from "./helpers";
import { apply, clone, diff, fleetWithIntent, getSpec } from "./specs-helpers";

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

  it("declares the one Error body for every error answer outside the FleetLock protocol", async () => {
    const doc = (await call("GET", "/openapi.json", { token: null })).json;
    const shared = doc.components.schemas.Error.properties.error.properties;
    const { details: _, ...sharedBesideDetails } = shared;
    const loose: string[] = [];
    let seen = 0;
    for (const [path, item] of Object.entries<Record<string, any>>(doc.paths)) {
      // FleetLock's protocol answers its own {kind, value} body, as Zincati and Flatcar read it.
      if (path.startsWith("/fleetlock/")) continue;
      for (const [method, op] of Object.entries<any>(item)) {
        for (const [status, response] of Object.entries<any>(op.responses)) {
          if (Number(status) < 400) continue;
          seen++;
          const ref: string | undefined = response.content?.["application/json"]?.schema?.$ref;
          const named = ref?.replace("#/components/schemas/", "");
          const body = named ? doc.components.schemas[named]?.properties?.error : undefined;
          // The shared body, or errorWithDetails's: the same fields, only `details` declared.
          const same =
            named === "Error" ||
            (body !== undefined &&
              JSON.stringify({ ...body.properties, details: undefined }) ===
                JSON.stringify({ ...sharedBesideDetails, details: undefined }) &&
              JSON.stringify(body.required) === JSON.stringify(["code", "message", "details"]));
          if (!same) loose.push(`${method.toUpperCase()} ${path} ${status}`);
        }
      }
    }
    expect(loose).toEqual([]);
    expect(seen).toBeGreaterThan(200);
  });

  // call and checkedFetch check every answer against the schema the document declares for its
  // status (test/contract.ts): these provoke the answers that once declared a loose body.
  it("answers the error each route declares, in the declared body", async () => {
    const { id: fleet } = await createFleet({ image_policy: "catalog" });
    const unknownFleet = `nope-${Date.now()}`;
    const answers = [
      await call("POST", "/v1/servers", { body: { fleet: unknownFleet, hostname: "a.example.com", kind: "managed" } }),
      await call("PUT", `/v1/fleets/${fleet}/channels/web`, { body: { image: "web", version: "1" } }),
      await call("PUT", `/v1/fleets/${fleet}/roles/r1`, { body: { agents: [{ name: "ghost" }] } }),
      await call("POST", "/v1/rollouts", { body: { fleet: unknownFleet, agent: "web", image: "web:2", version: "2" } }),
    ];
    const { fleet: specFleet } = await fleetWithIntent();
    const { spec, etag } = await getSpec(specFleet);
    const stale = clone(spec);
    stale.reboot_groups.default.slots = 9;
    await call("PUT", `/v1/fleets/${specFleet}/channels/base`, { body: { image: "reg/base:9", version: "9" } });
    answers.push(await apply(specFleet, stale, { ifMatch: etag }));
    const invalid = { ...clone(spec), roles: { edge: { agents: [{ name: "ghost" }] } } };
    answers.push(await apply(specFleet, invalid), await diff(specFleet, invalid));
    expect(answers.map((a) => [a.status, a.json.error.code])).toEqual([
      [422, "unknown_fleet"],
      [422, "image_not_found"],
      [422, "unknown_channel"],
      [422, "unknown_fleet"],
      [412, "precondition_failed"],
      [422, "invalid_spec"],
      [422, "invalid_spec"],
    ]);
    const download = (file: string) => checkedFetch(`${BASE}/v1/agent/download/${file}`);
    const [badArch, unpublished] = [await download("linux-sparc"), await download("linux-x64.sha256")];
    expect([badArch.status, ((await badArch.json()) as any).error.code]).toEqual([400, "invalid_param"]);
    expect([unpublished.status, ((await unpublished.json()) as any).error.code]).toEqual([404, "not_found"]);
  });
});
