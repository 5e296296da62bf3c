/**
 * Messages that say what is wrong (docs/operator-guide.md): the code that names the problem wins with its own
 * message; a registration without `kind` is a managed server, so the fleet's absence is what it
 * hears; validation messages name the fields.
 */
import { describe, expect, it } from "vitest";
import { call, createFleet, registerServer } from "./helpers";

describe("error messages", () => {
  it("duplicate_agent speaks with its own message, whatever other field also fails", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const agent = { name: "compute", image: "compute:9", version: "9" };
    // No generation (its issue comes first) and the same agent twice.
    const res = await call("PUT", `/v1/servers/${s.id}/desired`, { body: { agents: [agent, agent] } });
    expect(res.status).toBe(400);
    expect(res.json.error.code).toBe("duplicate_agent");
    expect(res.json.error.message).toMatch(/compute/);
    expect(res.json.error.message).not.toMatch(/expected number/);
  });

  it("a registration without kind is a managed server; with an unknown fleet it hears unknown_fleet", async () => {
    const unknown = await call("POST", "/v1/servers", { body: { fleet: "no-such-fleet", hostname: "a.example.com" } });
    expect(unknown.status).toBe(422);
    expect(unknown.json.error.code).toBe("unknown_fleet");
    const fleet = await createFleet();
    const ok = await call("POST", "/v1/servers", { body: { fleet: fleet.id, hostname: "a.example.com" } });
    expect(ok.status).toBe(201);
    expect(ok.json.kind).toBe("managed");
  });

  it("validation_failed names the failing fields in its message", async () => {
    const fleet = await createFleet();
    const res = await call("POST", "/v1/servers", {
      body: { fleet: fleet.id, hostname: "a.example.com", kind: "borrowed" },
    });
    expect(res.json.error.code).toBe("validation_failed");
    expect(res.json.error.message).toMatch(/^request body does not match the schema: kind: /);
  });
});
