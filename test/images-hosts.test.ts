import { describe, expect, it } from "vitest";
import { BASE, call, checkedFetch, createFleet, registerServer } from "./helpers";
import { r2Ops, resetR2Ops } from "../src/local/r2-meter";
import { apply } from "./specs-helpers";
import { bytesOf, digestOf, imageName, register, storedImage } from "./image-helpers";

const blob = (id: string, token: string, headers: Record<string, string> = {}) =>
  checkedFetch(`${BASE}/v1/agent/images/${id}/blob`, { headers: { Authorization: `Bearer ${token}`, ...headers } });

async function catalogFleetWithImage(bytes: Uint8Array) {
  const img = await storedImage(bytes);
  const { id: fleet } = await createFleet({ image_policy: "catalog" });
  const server = await registerServer(fleet);
  const put = await call("PUT", `/v1/servers/${server.id}/desired`, {
    body: { generation: 2, agents: [{ name: img.name, image_id: img.id }] },
  });
  expect(put.status, JSON.stringify(put.json)).toBe(200);
  return { img, fleet, server, config: put.json };
}

describe("desired configs naming catalog images", () => {
  it("carries the image's id, kind, digest, size and blob source to the host", async () => {
    const bytes = bytesOf(777, 11);
    const { img, server } = await catalogFleetWithImage(bytes);
    const desired = await call("GET", "/v1/agent/desired", { token: server.token });
    expect(desired.json.agents).toEqual([
      {
        name: img.name,
        image: img.name,
        version: img.version,
        instance_id: expect.any(String),
        image_id: img.id,
        kind: "tarball",
        digest: await digestOf(bytes),
        size: 777,
        source: { blob: `/v1/agent/images/${img.id}/blob` },
      },
    ]);
  });

  it("resolves a name and version to the catalog image, and refuses one the catalog lacks (422 image_not_found) under the check", async () => {
    const img = await storedImage(bytesOf(100, 12));
    const { id: fleet } = await createFleet({ image_policy: "catalog" });
    const server = await registerServer(fleet);
    const ok = await call("PUT", `/v1/servers/${server.id}/desired`, {
      body: { generation: 2, agents: [{ name: img.name, image: img.name, version: img.version }] },
    });
    expect(ok.status).toBe(200);
    expect(ok.json.agents[0].image_id).toBe(img.id);
    const missing = await call("PUT", `/v1/servers/${server.id}/desired`, {
      body: { generation: 3, agents: [{ name: "nope", image: "nope", version: "9" }] },
    });
    expect(missing.status).toBe(422);
    expect(missing.json.error.code).toBe("image_not_found");
    expect((await call("GET", `/v1/servers/${server.id}/desired`)).json.generation).toBe(2);
    const badId = await call("PUT", `/v1/servers/${server.id}/desired`, {
      body: { generation: 3, agents: [{ name: "x", image_id: "00000000-0000-4000-8000-000000000000" }] },
    });
    expect(badId.json.error.code).toBe("image_not_found");
  });

  it("keeps free-form images in fleets without the check, and turns the check on by PATCH", async () => {
    const { id: fleet } = await createFleet();
    expect((await call("GET", `/v1/fleets/${fleet}`)).json.image_policy).toBe("any");
    const server = await registerServer(fleet);
    const free = await call("PUT", `/v1/servers/${server.id}/desired`, {
      body: { generation: 2, agents: [{ name: "a", image: "registry.example/a:1", version: "1" }] },
    });
    expect(free.status).toBe(200);
    expect(free.json.agents[0].image_id).toBeUndefined();
    expect((await call("PATCH", `/v1/fleets/${fleet}`, { body: { image_policy: "catalog" } })).json.image_policy).toBe(
      "catalog",
    );
    const refused = await call("PUT", `/v1/servers/${server.id}/desired`, {
      body: { generation: 3, agents: [{ name: "a", image: "registry.example/a:2", version: "2" }] },
    });
    expect(refused.json.error.code).toBe("image_not_found");
  });

  it("refuses a channel or a rollout naming an image the catalog lacks (422 image_not_found) under the check", async () => {
    const { id: fleet } = await createFleet({ image_policy: "catalog" });
    const channel = await call("PUT", `/v1/fleets/${fleet}/channels/web`, { body: { image: "web", version: "1" } });
    expect(channel.status).toBe(422);
    expect(channel.json.error.code).toBe("image_not_found");
    const rollout = await call("POST", "/v1/rollouts", { body: { fleet, agent: "web", image: "web", version: "2" } });
    expect(rollout.status).toBe(422);
    expect(rollout.json.error.code).toBe("image_not_found");
    const img = await register({
      name: imageName(),
      version: "1",
      kind: "oci-ref",
      digest: `sha256:${"d".repeat(64)}`,
      size: 5,
      ref: `ghcr.io/org/web@sha256:${"d".repeat(64)}`,
    });
    const set = await call("PUT", `/v1/fleets/${fleet}/channels/web`, { body: { image_id: img.json.id } });
    expect(set.status).toBe(200);
    // A new server planned from the channel gets the reference as its source.
    await call("PUT", `/v1/fleets/${fleet}/roles/webserver`, { body: { agents: [{ name: "web" }] } });
    const server = await registerServer(fleet, { roles: ["webserver"] });
    const desired = await call("GET", "/v1/agent/desired", { token: server.token });
    expect(desired.json.agents[0]).toMatchObject({
      name: "web",
      image_id: img.json.id,
      kind: "oci-ref",
      source: { ref: img.json.ref },
    });
  });

  it("resolves a fleet spec's channels against the catalog when the spec turns the check on, and refuses one it lacks", async () => {
    const img = await storedImage(bytesOf(80, 13));
    const fleet = `spec-img-${Math.random().toString(36).slice(2, 8)}`;
    const spec = (channels: Record<string, unknown>) => ({
      apiVersion: "harbormaster/v1",
      kind: "FleetSpec",
      fleet,
      settings: { image_policy: "catalog" },
      channels,
    });
    const refused = await apply(fleet, spec({ web: { image: "web", version: "404" } }));
    expect(refused.status).toBe(422);
    expect(refused.json.error.details.problems).toEqual([
      { path: "channels.web", message: expect.stringContaining("image_not_found") },
    ]);
    expect((await call("GET", `/v1/fleets/${fleet}`)).status).toBe(404);
    const ok = await apply(fleet, spec({ [img.name]: { image: img.name, version: img.version } }));
    expect(ok.status, JSON.stringify(ok.json)).toBeLessThan(300);
    expect((await call("GET", `/v1/fleets/${fleet}/channels/${img.name}`)).json.image_id).toBe(img.id);
  });

  it("lets a rollout name a catalog image by id and hands each target its catalog fields", async () => {
    const v1 = await storedImage(bytesOf(64, 1), {
      name: "rolled" + Math.random().toString(36).slice(2, 7),
      version: "1",
    });
    const v2 = await storedImage(bytesOf(64, 2), { name: v1.name, version: "2" });
    const { id: fleet } = await createFleet({ image_policy: "catalog" });
    const server = await registerServer(fleet);
    await call("PUT", `/v1/servers/${server.id}/desired`, {
      body: { generation: 2, agents: [{ name: v1.name, image_id: v1.id }] },
    });
    const r = await call("POST", "/v1/rollouts", { body: { fleet, agent: v1.name, image_id: v2.id } });
    expect(r.status, JSON.stringify(r.json)).toBe(201);
    expect(r.json).toMatchObject({ image: v1.name, version: "2" });
    const desired = await call("GET", "/v1/agent/desired", { token: server.token });
    expect(desired.json.agents[0]).toMatchObject({ image_id: v2.id, digest: v2.digest, version: "2" });
    const inUse = await call("DELETE", `/v1/images/${v2.id}`);
    expect(inUse.status).toBe(409);
    expect(inUse.json.error.details.rollouts.map((x: any) => x.id)).toContain(r.json.id);
  });
});

describe("GET /v1/agent/images/{id}/blob", () => {
  it("serves the bytes whole and by Range, with the digest as ETag and the length", async () => {
    const bytes = bytesOf(5000, 21);
    const { img, server } = await catalogFleetWithImage(bytes);
    const whole = await blob(img.id, server.token);
    expect(whole.status).toBe(200);
    expect(whole.headers.get("ETag")).toBe(`"${img.digest}"`);
    expect(whole.headers.get("Content-Length")).toBe("5000");
    expect(new Uint8Array(await whole.arrayBuffer())).toEqual(bytes);
    const part = await blob(img.id, server.token, { Range: "bytes=100-199" });
    expect(part.status).toBe(206);
    expect(part.headers.get("Content-Range")).toBe("bytes 100-199/5000");
    expect(new Uint8Array(await part.arrayBuffer())).toEqual(bytes.subarray(100, 200));
    const tail = await blob(img.id, server.token, { Range: "bytes=4990-" });
    expect(new Uint8Array(await tail.arrayBuffer())).toEqual(bytes.subarray(4990));
    const suffix = await blob(img.id, server.token, { Range: "bytes=-10" });
    expect(new Uint8Array(await suffix.arrayBuffer())).toEqual(bytes.subarray(4990));
    expect((await blob(img.id, server.token, { Range: "bytes=6000-" })).status).toBe(416);
    expect((await blob(img.id, server.token, { "If-None-Match": `"${img.digest}"` })).status).toBe(304);
    // Weak comparison, as RFC 9110 has If-None-Match compare: a W/ tag matches, in a list too.
    expect((await blob(img.id, server.token, { "If-None-Match": `W/"${img.digest}"` })).status).toBe(304);
    expect((await blob(img.id, server.token, { "If-None-Match": `"other", W/"${img.digest}"` })).status).toBe(304);
    // An unquoted digest is not an entity tag.
    expect((await blob(img.id, server.token, { "If-None-Match": img.digest })).status).toBe(200);
    // A long list is read whole (the current tag last), and a long or odd one that names no
    // current tag just does not match: never a 400 (RFC 9110 §13.1.2).
    const others = Array.from({ length: 20 }, (_, i) => `"sha256:${String(i).padStart(64, "0")}"`).join(", ");
    expect(others.length).toBeGreaterThan(1000);
    expect((await blob(img.id, server.token, { "If-None-Match": `${others}, "${img.digest}"` })).status).toBe(304);
    for (const odd of [others, "x".repeat(2000), `W/"${"~".repeat(300)}"`]) {
      const res = await blob(img.id, server.token, { "If-None-Match": odd });
      expect(res.status, odd.slice(0, 40)).toBe(200);
      expect(new Uint8Array(await res.arrayBuffer())).toEqual(bytes);
    }
  });

  it("costs one R2 Class B operation per download, whole or by Range, and three Class A to upload a one-part image", async () => {
    resetR2Ops();
    const bytes = bytesOf(3000, 23);
    const { img, server } = await catalogFleetWithImage(bytes);
    // Upload: create the multipart upload, one part, complete (A); completion reads it back (B).
    expect(r2Ops).toMatchObject({ class_a: 3, class_b: 1 });
    resetR2Ops();
    await (await blob(img.id, server.token)).arrayBuffer();
    await (await blob(img.id, server.token, { Range: "bytes=0-999" })).arrayBuffer();
    expect(r2Ops).toMatchObject({ class_a: 0, class_b: 2, bytes_read: 4000 });
  });

  it("answers 404 to another server's token, and 403 to an operator token", async () => {
    const { img, fleet } = await catalogFleetWithImage(bytesOf(50, 22));
    const other = await registerServer(fleet);
    const res = await blob(img.id, other.token);
    expect(res.status).toBe(404);
    expect(((await res.json()) as any).error.code).toBe("not_found");
    expect((await blob(img.id, "test-admin-token")).status).toBe(403);
  });
});
