/**
 * Maps whose keys a client chooses (labels, capabilities, the budget's per-label limits, a spec's
 * sections and secrets) refuse a `__proto__` key with a 400 that names its path (a spec: among its
 * problems), and change nothing. zod alone leaves that key out without a word: the rest of the body would be taken, and
 * the client told it was.
 */
import { describe, expect, it } from "vitest";
import { call, createFleet, registerServer, uniq } from "./helpers";

/** A JSON body with `__proto__` as an own key of the object at `path` (JSON.parse keeps it as one). */
function withProto(body: Record<string, unknown>, path: string[], value: unknown): string {
  const text = JSON.stringify(body);
  const parsed = JSON.parse(text) as Record<string, unknown>;
  let at: Record<string, unknown> = parsed;
  for (const k of path) at = (at[k] ??= {}) as Record<string, unknown>;
  Object.defineProperty(at, "__proto__", { value, enumerable: true, configurable: true, writable: true });
  return JSON.stringify(parsed);
}

async function refused(method: string, path: string, rawBody: string, field: string) {
  const res = await call(method, path, { rawBody, headers: { "Content-Type": "application/json" } });
  expect(res.status, JSON.stringify(res.json)).toBe(400);
  expect(res.json.error.code).toBe("validation_failed");
  expect(res.json.error.details.map((d: { path: string }) => d.path)).toContain(`${field}.__proto__`);
  expect(res.json.error.message).toMatch(/__proto__/);
  return res;
}

describe("a __proto__ key", () => {
  it("in a registration's labels is refused with its path, and registers nothing", async () => {
    const { id: fleet } = await createFleet();
    const hostname = `${uniq("proto")}.example.com`;
    await refused(
      "POST",
      "/v1/servers",
      withProto({ fleet, hostname, labels: { zone: "eu-1a" } }, ["labels"], "x"),
      "labels",
    );
    expect((await call("GET", `/v1/servers?fleet=${fleet}`)).json.items).toEqual([]);
  });

  it("in a PATCH of labels is refused, and the labels are as they were", async () => {
    const { id: fleet } = await createFleet();
    const s = await registerServer(fleet, { labels: { zone: "eu-1a" } });
    await refused("PATCH", `/v1/servers/${s.id}`, withProto({ labels: { rack: "r1" } }, ["labels"], null), "labels");
    expect((await call("GET", `/v1/servers/${s.id}`)).json.labels).toEqual({ zone: "eu-1a" });
  });

  it("in an enrollment token's labels is refused, and no token is made", async () => {
    const { id: fleet } = await createFleet();
    const expires_at = new Date(Date.now() + 86_400_000).toISOString();
    await refused(
      "POST",
      `/v1/fleets/${fleet}/enrollment-tokens`,
      withProto({ expires_at, labels: { zone: "eu-1a" } }, ["labels"], "x"),
      "labels",
    );
    expect((await call("GET", `/v1/fleets/${fleet}/enrollment-tokens`)).json.items).toEqual([]);
  });

  it("in a fleet's capabilities or its budget's per_label is refused, and the fleet is as it was", async () => {
    const id = uniq("f");
    await refused(
      "POST",
      "/v1/fleets",
      withProto({ id, capabilities: { gpu: true } }, ["capabilities"], true),
      "capabilities",
    );
    expect((await call("GET", `/v1/fleets/${id}`)).status).toBe(404);
    const { id: fleet } = await createFleet({ capabilities: { gpu: true } });
    const before = (await call("GET", `/v1/fleets/${fleet}`)).json;
    await refused(
      "PATCH",
      `/v1/fleets/${fleet}`,
      withProto({ capabilities: {} }, ["capabilities"], null),
      "capabilities",
    );
    await refused(
      "PATCH",
      `/v1/fleets/${fleet}`,
      withProto(
        { disruption_budget: { max_unavailable: 1, per_label: { zone: 1 } } },
        ["disruption_budget", "per_label"],
        1,
      ),
      "disruption_budget.per_label",
    );
    expect((await call("GET", `/v1/fleets/${fleet}`)).json).toEqual(before);
  });

  it("in a fleet spec's section is refused by diff and apply as a problem with its path, and applies nothing", async () => {
    const { id: fleet } = await createFleet();
    const spec = (await call("GET", `/v1/fleets/${fleet}/spec`)).json;
    const rawBody = withProto({ ...spec, capabilities: { gpu: true } }, ["capabilities"], true);
    for (const [method, path] of [
      ["POST", `/v1/fleets/${fleet}/spec:diff`],
      ["PUT", `/v1/fleets/${fleet}/spec`],
    ]) {
      // A spec's problems are answered together, as the spec's own refusal (422 invalid_spec).
      const res = await call(method, path, { rawBody, headers: { "Content-Type": "application/json" } });
      expect(res.status).toBe(422);
      expect(res.json.error.code).toBe("invalid_spec");
      expect(res.json.error.details.problems).toContainEqual({
        path: "capabilities.__proto__",
        message: expect.stringMatching(/__proto__/),
      });
    }
    expect((await call("GET", `/v1/fleets/${fleet}`)).json.capabilities).toEqual({});
  });

  it("in an image's labels is refused, and no image is registered", async () => {
    const version = `1.0.${Date.now() % 100000}`;
    const digest = `sha256:${"a".repeat(64)}`;
    const image = {
      name: "proto-agent",
      version,
      kind: "oci-ref",
      digest,
      size: 1,
      ref: `registry.example/proto@${digest}`,
      labels: { tier: "gold" },
    };
    await refused("POST", "/v1/images", withProto(image, ["labels"], "x"), "labels");
    const list = (await call("GET", "/v1/images?name=proto-agent")).json.items ?? [];
    expect(list.filter((i: { version: string }) => i.version === version)).toEqual([]);
  });
});
