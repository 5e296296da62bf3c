/**
 * hm's creates against the real local server when an answer is lost: the connection drops as the
 * answer comes back, after the server committed. The retry must find what the first attempt made.
 */
import { createHash, randomBytes } from "node:crypto";
import { Readable } from "node:stream";
import { describe, expect, inject, it } from "vitest";
import { Api, ApiError } from "../cli/api.ts";

const url = inject("hmUrl");

/** An Api whose first answer to a matching request is lost. */
function losingFirst(match: (method: string, path: string) => boolean) {
  const sent: { path: string; key: string | null }[] = [];
  const api = new Api(url, inject("hmAdmin"), async (input, init) => {
    const res = await fetch(input, init);
    const path = new URL(String(input)).pathname;
    if (match(init?.method ?? "GET", path)) {
      sent.push({ path, key: new Headers(init?.headers).get("idempotency-key") });
      if (sent.length === 1) {
        await res.body?.cancel();
        throw new TypeError("fetch failed");
      }
    }
    return res;
  });
  return { api, sent };
}

describe("an image registration whose answer was lost", () => {
  it("is sent again and answered with the image the first one registered: one image, not two", async () => {
    const { api, sent } = losingFirst((method, path) => method === "POST" && path === "/v1/images");
    const name = `retried-${randomBytes(4).toString("hex")}`;
    const digest = `sha256:${randomBytes(32).toString("hex")}`;
    const image = await api.registerImage({
      name,
      version: "1.0.0",
      kind: "oci-ref",
      digest,
      size: 1234,
      ref: `registry.example.com/org/x@${digest}`,
    });
    expect(sent).toHaveLength(2);
    expect(image).toMatchObject({ name, version: "1.0.0", state: "ready" });
    expect((await api.listImages({ name })).map((i) => i.id)).toEqual([image.id]);
  });
});

describe("an image completion whose digest_mismatch answer was lost", () => {
  it("is sent again and refused the same way, with the same details, not 404", async () => {
    const { api, sent } = losingFirst((method, path) => method === "POST" && path.endsWith("/complete"));
    const bytes = randomBytes(4096);
    const expected = `sha256:${randomBytes(32).toString("hex")}`;
    const image = await api.registerImage({
      name: `retried-${randomBytes(4).toString("hex")}`,
      version: "1.0.0",
      kind: "tarball",
      digest: expected,
      size: bytes.length,
    });
    await api.putImagePart(image.id, 1, Readable.toWeb(Readable.from([bytes])) as ReadableStream<Uint8Array>, 4096);
    const refused = await api.completeImage(image.id).catch((err: unknown) => err);
    expect(sent).toHaveLength(2);
    expect(refused).toBeInstanceOf(ApiError);
    expect(refused).toMatchObject({
      status: 422,
      code: "digest_mismatch",
      details: { expected, actual: `sha256:${createHash("sha256").update(bytes).digest("hex")}` },
    });
  });
});

describe("an enrollment token create whose answer was lost", () => {
  it("is sent again with the same Idempotency-Key and answered with the one token, whose secret enrolls", async () => {
    const fleet = `retried-${randomBytes(4).toString("hex")}`;
    const { api, sent } = losingFirst((method, path) => method === "POST" && path.endsWith("/enrollment-tokens"));
    await api.createFleet({ id: fleet });
    const expires_at = new Date(Date.now() + 3600_000).toISOString();
    const created = await api.createEnrollmentToken(fleet, { expires_at, name: "lost answer" });
    expect(sent).toHaveLength(2);
    expect(sent[0].key).toMatch(/^[0-9a-f-]{36}$/);
    expect(sent[1].key).toBe(sent[0].key);
    expect((await api.listEnrollmentTokens(fleet)).map((t) => t.id)).toEqual([created.id]);
    const enrolled = await fetch(`${url}/v1/agent/enroll`, {
      method: "POST",
      headers: { authorization: `Bearer ${created.token}`, "content-type": "application/json" },
      body: JSON.stringify({
        hostname: "lost-1.example.com",
        machine_id: randomBytes(16).toString("hex"),
        boot_id: "b",
      }),
    });
    expect(enrolled.status).toBe(201);
    // Another call is another create: a key of its own.
    const next = await api.createEnrollmentToken(fleet, { expires_at, name: "lost answer" });
    expect(sent[2].key).not.toBe(sent[0].key);
    expect(next.id).not.toBe(created.id);
  });
});
