import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { completeUpload, sweepImages } from "../src/images/service";
import { ABANDONED_UPLOAD_MS } from "../src/domain/images";
import { BASE, call, checkedFetch, createFleet } from "./helpers";
import { bytesOf, digestOf, imageName, MiB, putPart, r2Head, register, storedImage } from "./image-helpers";

const HEX = "a".repeat(64);
/** An error answer as the client reads it, less the request's own id. */
const withoutRequestId = (body: { error: Record<string, unknown> }) => {
  const { request_id: _, ...error } = body.error;
  return error;
};
const ref = (digest = `sha256:${HEX}`) => `registry.example.com/org/x@${digest}`;

async function tokenWith(scope: "read" | "write") {
  const res = await call("POST", "/v1/tokens", { body: { name: `${scope} images`, scope } });
  expect(res.status).toBe(201);
  return res.json.token as string;
}

describe("registering images", () => {
  it("registers an oci-ref ready at once, answers the same image to the same registration, and 409 to other content", async () => {
    const name = imageName();
    const body = {
      name,
      version: "1.0.0",
      kind: "oci-ref",
      digest: `sha256:${HEX}`,
      size: 1234,
      ref: ref(),
      labels: { team: "net" },
    };
    const first = await register(body);
    expect(first.status).toBe(201);
    expect(first.json).toMatchObject({
      name,
      version: "1.0.0",
      kind: "oci-ref",
      state: "ready",
      ref: ref(),
      labels: { team: "net" },
    });
    const again = await register(body);
    expect(again.status).toBe(200);
    expect(again.json.id).toBe(first.json.id);
    const other = await register({ ...body, digest: `sha256:${"b".repeat(64)}`, ref: ref(`sha256:${"b".repeat(64)}`) });
    expect(other.status).toBe(409);
    expect(other.json.error.code).toBe("image_conflict");
    expect(other.json.error.details.id).toBe(first.json.id);
    expect((await call("GET", `/v1/images/${first.json.id}`)).json.digest).toBe(`sha256:${HEX}`);
    // Labels and a description are part of what was registered: another set is refused, not dropped.
    for (const changed of [{ labels: { team: "web" } }, { labels: {} }, { description: "another" }]) {
      const res = await register({ ...body, ...changed });
      expect(res.status, JSON.stringify(changed)).toBe(409);
      expect(res.json.error.code).toBe("image_conflict");
    }
    expect((await call("GET", `/v1/images/${first.json.id}`)).json.labels).toEqual({ team: "net" });
  });

  it("refuses bad input and keeps nothing: a ref not pinned by the digest, oversized names and labels, a wrong content type", async () => {
    const name = imageName();
    const base = { name, version: "1", kind: "oci-ref", digest: `sha256:${HEX}`, size: 1, ref: ref() };
    const bad = [
      { ...base, ref: "registry.example.com/org/x:latest" },
      { ...base, ref: ref(`sha256:${"c".repeat(64)}`) },
      { ...base, name: "x".repeat(64) },
      { ...base, version: "v".repeat(129) },
      { ...base, labels: { ["k".repeat(64)]: "v" } },
      { ...base, labels: { k: "v".repeat(257) } },
      { ...base, labels: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`k${i}`, "v"])) },
      { ...base, digest: "sha256:ABC" },
      { ...base, kind: "tarball", ref: undefined, size: 3 * 1024 * MiB },
      { ...base, kind: "tarball" },
    ];
    for (const body of bad) {
      const res = await register(body);
      expect(res.status, JSON.stringify(body).slice(0, 80)).toBe(400);
    }
    const text = await call("POST", "/v1/images", {
      rawBody: JSON.stringify(base),
      headers: { "Content-Type": "text/plain" },
    });
    expect(text.status).toBe(415);
    expect((await call("GET", `/v1/images?name=${name}`)).json.items).toEqual([]);
  });

  it("refuses a read token's push (403) and serves it the catalog", async () => {
    const read = await tokenWith("read");
    const res = await register(
      { name: imageName(), version: "1", kind: "oci-ref", digest: `sha256:${HEX}`, size: 1, ref: ref() },
      read,
    );
    expect(res.status).toBe(403);
    expect((await call("GET", "/v1/images", { token: read })).status).toBe(200);
  });
});

describe("uploading an image's bytes", () => {
  it("takes a single-part upload, checks the digest, and keeps the bytes in R2", async () => {
    const bytes = bytesOf(1000, 7);
    const img = await storedImage(bytes);
    expect(img).toMatchObject({ state: "ready", size: 1000, digest: await digestOf(bytes) });
    const object = await env.IMAGES.get(`images/${img.id}`);
    expect(new Uint8Array(await object!.arrayBuffer())).toEqual(bytes);
  });

  it("takes parts in any order, lists those received so a client can resume, and completes only when all are there", async () => {
    const bytes = bytesOf(2 * 5 * MiB + 123, 3);
    const reg = await register({
      name: imageName(),
      version: "2",
      kind: "oci-archive",
      digest: await digestOf(bytes),
      size: bytes.length,
      part_size: 5 * MiB,
    });
    expect(reg.status).toBe(201);
    expect(reg.json.upload).toEqual({ part_size: 5 * MiB, parts: 3, received: [] });
    const id = reg.json.id;
    expect((await putPart(id, 3, bytes.subarray(10 * MiB))).status).toBe(200);
    expect((await putPart(id, 1, bytes.subarray(0, 5 * MiB))).json.upload.received).toEqual([1, 3]);
    // The connection dropped here: the client asks what is done (a re-registration answers the same).
    expect((await call("GET", `/v1/images/${id}`)).json.upload.received).toEqual([1, 3]);
    const again = await register({
      name: reg.json.name,
      version: "2",
      kind: "oci-archive",
      digest: reg.json.digest,
      size: bytes.length,
      part_size: 5 * MiB,
    });
    expect(again.status).toBe(200);
    expect(again.json.upload.received).toEqual([1, 3]);
    const early = await call("POST", `/v1/images/${id}/complete`);
    expect(early.status).toBe(409);
    expect(early.json.error).toMatchObject({ code: "upload_incomplete", details: { missing: [2] } });
    expect((await putPart(id, 2, bytes.subarray(5 * MiB, 10 * MiB))).status).toBe(200);
    const done = await call("POST", `/v1/images/${id}/complete`);
    expect(done.status).toBe(200);
    expect(done.json.state).toBe("ready");
    expect(done.json.upload).toBeUndefined();
    expect((await r2Head(id))!.size).toBe(bytes.length);
    // Completing again answers the ready image.
    expect((await call("POST", `/v1/images/${id}/complete`)).status).toBe(200);
  });

  it("completes an upload that R2 assembled before a crash kept the call from recording it", async () => {
    const bytes = bytesOf(3000, 31);
    const reg = await register({
      name: imageName(),
      version: "1",
      kind: "tarball",
      digest: await digestOf(bytes),
      size: 3000,
    });
    const put = await putPart(reg.json.id, 1, bytes);
    const row = (await env.DB.prepare("SELECT upload_id FROM images WHERE id = ?")
      .bind(reg.json.id)
      .first<{ upload_id: string }>())!;
    // The first completion got as far as R2 and died there: the upload is assembled, the row still 'uploading'.
    const etag = (await env.DB.prepare("SELECT etag FROM image_parts WHERE image_id = ?")
      .bind(reg.json.id)
      .first<{ etag: string }>())!.etag;
    await env.IMAGES.resumeMultipartUpload(`images/${reg.json.id}`, row.upload_id).complete([{ partNumber: 1, etag }]);
    expect(put.status).toBe(200);
    const retried = await call("POST", `/v1/images/${reg.json.id}/complete`);
    expect(retried.status).toBe(200);
    expect(retried.json.state).toBe("ready");
  });

  it("answers 409 upload_incomplete, not a 500, when a part sent twice at once left D1 with the etag R2 replaced; resent, it completes", async () => {
    const good = bytesOf(3000, 41);
    const reg = await register({
      name: imageName(),
      version: "1",
      kind: "tarball",
      digest: await digestOf(good),
      size: 3000,
    });
    const etagOf = async () =>
      (await env.DB.prepare("SELECT etag FROM image_parts WHERE image_id = ?")
        .bind(reg.json.id)
        .first<{ etag: string }>())!.etag;
    expect((await putPart(reg.json.id, 1, bytesOf(3000, 42))).status).toBe(200);
    const replaced = await etagOf();
    expect((await putPart(reg.json.id, 1, good)).status).toBe(200);
    // The race's outcome: R2 took the second upload last, D1 recorded the first one last.
    await env.DB.prepare("UPDATE image_parts SET etag = ? WHERE image_id = ?").bind(replaced, reg.json.id).run();
    const refused = await call("POST", `/v1/images/${reg.json.id}/complete`);
    expect([refused.status, refused.json.error.code]).toEqual([409, "upload_incomplete"]);
    expect(refused.json.error.details).toEqual({ missing: [1], parts: 1 });
    const resumed = await call("GET", `/v1/images/${reg.json.id}`);
    expect(resumed.json).toMatchObject({ state: "uploading", upload: { received: [] } });
    expect((await putPart(reg.json.id, 1, good)).status).toBe(200);
    const done = await call("POST", `/v1/images/${reg.json.id}/complete`);
    expect([done.status, done.json.state]).toEqual([200, "ready"]);
  });

  it("refuses bytes whose digest is not the registered one and keeps nothing", async () => {
    const bytes = bytesOf(4096, 1);
    const reg = await register({
      name: imageName(),
      version: "1",
      kind: "tarball",
      digest: await digestOf(bytesOf(4096, 2)),
      size: 4096,
    });
    expect((await putPart(reg.json.id, 1, bytes)).status).toBe(200);
    const res = await call("POST", `/v1/images/${reg.json.id}/complete`);
    expect(res.status).toBe(422);
    expect(res.json.error).toMatchObject({ code: "digest_mismatch", details: { actual: await digestOf(bytes) } });
    expect((await call("GET", `/v1/images/${reg.json.id}`)).status).toBe(404);
    expect(await r2Head(reg.json.id)).toBeNull();
    const owed = await env.DB.prepare("SELECT count(*) AS n FROM image_deletions WHERE key = ?")
      .bind(`images/${reg.json.id}`)
      .first<{ n: number }>();
    expect(owed!.n).toBe(0);
    // The name and version are free again.
    expect(
      (
        await register({
          name: reg.json.name,
          version: "1",
          kind: "tarball",
          digest: await digestOf(bytes),
          size: 4096,
        })
      ).status,
    ).toBe(201);
  });

  it("answers a completion sent again after a digest_mismatch with the same refusal, not 404", async () => {
    const bytes = bytesOf(2048, 7);
    const registered = await digestOf(bytesOf(2048, 8));
    const reg = await register({ name: imageName(), version: "1", kind: "tarball", digest: registered, size: 2048 });
    expect((await putPart(reg.json.id, 1, bytes)).status).toBe(200);
    const first = await call("POST", `/v1/images/${reg.json.id}/complete`);
    expect([first.status, first.json.error.code]).toEqual([422, "digest_mismatch"]);
    // The first answer was lost: the client sends the completion again.
    const again = await call("POST", `/v1/images/${reg.json.id}/complete`);
    expect(again.status).toBe(422);
    expect(withoutRequestId(again.json)).toEqual(withoutRequestId(first.json));
    expect(again.json.error.details).toEqual({ expected: registered, actual: await digestOf(bytes) });
    // The image itself is gone, and an id never registered is still not found.
    expect((await call("GET", `/v1/images/${reg.json.id}`)).status).toBe(404);
    const unknown = await call("POST", `/v1/images/${crypto.randomUUID()}/complete`);
    expect([unknown.status, unknown.json.error.code]).toEqual([404, "not_found"]);
  });

  it("answers a completion sent again after bytes of the wrong size with the same refusal", async () => {
    const reg = await register({
      name: imageName(),
      version: "1",
      kind: "tarball",
      digest: await digestOf(bytesOf(3000, 9)),
      size: 3000,
    });
    expect((await putPart(reg.json.id, 1, bytesOf(3000, 9))).status).toBe(200);
    // The assembled object is not the registered size (a part replaced behind D1's back).
    const row = (await env.DB.prepare("SELECT upload_id FROM images WHERE id = ?")
      .bind(reg.json.id)
      .first<{ upload_id: string }>())!;
    const upload = env.IMAGES.resumeMultipartUpload(`images/${reg.json.id}`, row.upload_id);
    const short = await upload.uploadPart(1, bytesOf(1000, 9));
    await env.DB.prepare("UPDATE image_parts SET etag = ? WHERE image_id = ?").bind(short.etag, reg.json.id).run();
    const first = await call("POST", `/v1/images/${reg.json.id}/complete`);
    expect([first.status, first.json.error.details.actual]).toEqual([422, null]);
    expect(first.json.error.message).toContain("1000, not the 3000 registered");
    const again = await call("POST", `/v1/images/${reg.json.id}/complete`);
    expect([again.status, withoutRequestId(again.json)]).toEqual([422, withoutRequestId(first.json)]);
  });

  it("answers a retried completion with the refusal an older release recorded without the registered size", async () => {
    const reg = await register({
      name: imageName(),
      version: "1",
      kind: "tarball",
      digest: await digestOf(bytesOf(3000, 11)),
      size: 3000,
    });
    expect((await putPart(reg.json.id, 1, bytesOf(3000, 11))).status).toBe(200);
    const row = (await env.DB.prepare("SELECT upload_id FROM images WHERE id = ?")
      .bind(reg.json.id)
      .first<{ upload_id: string }>())!;
    const upload = env.IMAGES.resumeMultipartUpload(`images/${reg.json.id}`, row.upload_id);
    const short = await upload.uploadPart(1, bytesOf(1000, 11));
    await env.DB.prepare("UPDATE image_parts SET etag = ? WHERE image_id = ?").bind(short.etag, reg.json.id).run();
    const first = await call("POST", `/v1/images/${reg.json.id}/complete`);
    expect(first.status).toBe(422);
    // The audit row as code older than `registered_size` wrote it.
    await env.DB.prepare(
      "UPDATE audit_log SET details = json_remove(details, '$.registered_size') WHERE target = ? AND action = 'image.upload_refused'",
    )
      .bind(`image:${reg.json.id}`)
      .run();
    const again = await call("POST", `/v1/images/${reg.json.id}/complete`);
    expect([again.status, again.json.error.code]).toEqual([422, "digest_mismatch"]);
    expect(again.json.error.details).toEqual(first.json.error.details);
    expect(again.json.error.message).toBe("the uploaded bytes are 1000, not the registered size; nothing was kept");
  });

  it("does not record a part whose body is shorter or longer than its size, or not sent as octet-stream", async () => {
    const bytes = bytesOf(2048, 5);
    const reg = await register({
      name: imageName(),
      version: "1",
      kind: "tarball",
      digest: await digestOf(bytes),
      size: 2048,
    });
    const id = reg.json.id;
    const short = await putPart(id, 1, bytes.subarray(0, 2000));
    expect(short.status).toBe(400);
    expect(short.json.error).toMatchObject({ code: "invalid_part", details: { expected_bytes: 2048 } });
    expect((await putPart(id, 2, bytes)).json.error.code).toBe("invalid_part");
    const json = await putPart(id, 1, bytes, { "Content-Type": "application/json" });
    expect(json.status).toBe(415);
    // A body that ends before its Content-Length (a dropped connection) is not recorded either.
    const { readable, writable } = new TransformStream();
    const writer = writable.getWriter();
    void writer.write(bytes.subarray(0, 1000)).then(() => writer.close());
    const cut = await SELFfetchStream(id, readable, 2048);
    expect(cut).toBeGreaterThanOrEqual(400);
    expect((await call("GET", `/v1/images/${id}`)).json.upload.received).toEqual([]);
    expect((await call("POST", `/v1/images/${id}/complete`)).json.error.code).toBe("upload_incomplete");
  });

  it("refuses parts for a reference, and a part over the part limit", async () => {
    const r = await register({
      name: imageName(),
      version: "1",
      kind: "oci-ref",
      digest: `sha256:${HEX}`,
      size: 1,
      ref: ref(),
    });
    expect((await putPart(r.json.id, 1, bytesOf(10))).json.error.code).toBe("invalid_state");
    const big = await checkedFetch(`${BASE}/v1/images/${r.json.id}/parts/1`, {
      method: "PUT",
      headers: {
        Authorization: "Bearer test-admin-token",
        "Content-Type": "application/octet-stream",
        "Content-Length": String(51 * MiB),
      },
      body: bytesOf(16),
    }).catch(() => null);
    // Either the runtime refuses the lying Content-Length, or the worker does (413): nothing is kept.
    if (big) expect([400, 413]).toContain(big.status);
  });
});

/** A part sent as a stream that ends early, with the Content-Length of the whole part. */
async function SELFfetchStream(id: string, body: ReadableStream, length: number) {
  try {
    const res = await checkedFetch(`${BASE}/v1/images/${id}/parts/1`, {
      method: "PUT",
      headers: {
        Authorization: "Bearer test-admin-token",
        "Content-Type": "application/octet-stream",
        "Content-Length": String(length),
      },
      body,
      duplex: "half",
    } as RequestInit);
    return res.status;
  } catch {
    return 499;
  }
}

describe("listing, reading and deleting images", () => {
  it("lists by name and version, paged", async () => {
    const name = imageName();
    for (const v of ["1", "2", "3"]) {
      expect(
        (await register({ name, version: v, kind: "oci-ref", digest: `sha256:${HEX}`, size: 1, ref: ref() })).status,
      ).toBe(201);
    }
    const first = await call("GET", `/v1/images?name=${name}&limit=2`);
    expect(first.json.items.map((i: any) => i.version)).toEqual(["1", "2"]);
    const rest = await call("GET", `/v1/images?name=${name}&limit=2&cursor=${first.json.next_cursor}`);
    expect(rest.json.items.map((i: any) => i.version)).toEqual(["3"]);
    expect(rest.json.next_cursor).toBeNull();
    expect((await call("GET", `/v1/images?name=${name}&version=2`)).json.items).toHaveLength(1);
  });

  it("refuses to delete an image a channel wants (409 image_in_use naming it), then deletes it and its bytes", async () => {
    const img = await storedImage(bytesOf(300, 9));
    const { id: fleet } = await createFleet({ image_policy: "catalog" });
    expect((await call("PUT", `/v1/fleets/${fleet}/channels/${img.name}`, { body: { image_id: img.id } })).status).toBe(
      200,
    );
    const refused = await call("DELETE", `/v1/images/${img.id}`);
    expect(refused.status).toBe(409);
    expect(refused.json.error.code).toBe("image_in_use");
    expect(refused.json.error.details.channels).toEqual([{ fleet, agent: img.name }]);
    expect((await call("GET", `/v1/images/${img.id}`)).json.used_by.channels).toEqual([{ fleet, agent: img.name }]);
    expect(await r2Head(img.id)).not.toBeNull();
    const next = await register({
      name: img.name,
      version: "2.0.0",
      kind: "oci-ref",
      digest: `sha256:${HEX}`,
      size: 1,
      ref: ref(),
    });
    expect(
      (await call("PUT", `/v1/fleets/${fleet}/channels/${img.name}`, { body: { image_id: next.json.id } })).status,
    ).toBe(200);
    expect((await call("DELETE", `/v1/images/${img.id}`)).status).toBe(200);
    expect((await call("GET", `/v1/images/${img.id}`)).status).toBe(404);
    expect(await r2Head(img.id)).toBeNull();
  });
});

describe("the abandoned-upload sweep", () => {
  it("deletes R2 objects a crash left owed after their image was forgotten", async () => {
    const key = `images/${crypto.randomUUID()}`;
    await env.IMAGES.put(key, "left behind");
    await env.DB.prepare("INSERT INTO image_deletions (key, upload_id, at) VALUES (?, NULL, ?)")
      .bind(key, Date.now())
      .run();
    await sweepImages(env, Date.now());
    expect(await env.IMAGES.head(key)).toBeNull();
    expect(await env.DB.prepare("SELECT key FROM image_deletions WHERE key = ?").bind(key).first()).toBeNull();
  });

  it("aborts uploads older than a day and forgets their rows; younger ones stay", async () => {
    const bytes = bytesOf(5000, 4);
    const old = await register({
      name: imageName(),
      version: "1",
      kind: "tarball",
      digest: await digestOf(bytes),
      size: 5000,
    });
    const young = await register({
      name: imageName(),
      version: "1",
      kind: "tarball",
      digest: await digestOf(bytes),
      size: 5000,
    });
    expect((await putPart(old.json.id, 1, bytes)).status).toBe(200);
    const now = Date.now();
    const uploadId = (await env.DB.prepare("SELECT upload_id FROM images WHERE id = ?")
      .bind(old.json.id)
      .first<{ upload_id: string }>())!.upload_id;
    await env.DB.prepare("UPDATE images SET created_at = ? WHERE id = ?")
      .bind(now - ABANDONED_UPLOAD_MS - 1000, old.json.id)
      .run();
    const swept = await sweepImages(env, now);
    expect(swept.abandoned).toBeGreaterThanOrEqual(1);
    expect((await call("GET", `/v1/images/${old.json.id}`)).status).toBe(404);
    expect((await call("GET", `/v1/images/${young.json.id}`)).json.state).toBe("uploading");
    const parts = await env.DB.prepare("SELECT count(*) AS n FROM image_parts WHERE image_id = ?")
      .bind(old.json.id)
      .first<{ n: number }>();
    expect(parts!.n).toBe(0);
    const owed = await env.DB.prepare("SELECT count(*) AS n FROM image_deletions WHERE key = ?")
      .bind(`images/${old.json.id}`)
      .first<{ n: number }>();
    expect(owed!.n).toBe(0);
    // The upload is gone from R2: completing it there fails.
    const upload = env.IMAGES.resumeMultipartUpload(`images/${old.json.id}`, uploadId);
    await expect(upload.uploadPart(1, bytes)).rejects.toThrow();
  });
});

/** env with a D1 that runs `before` ahead of the next batch: what a concurrent writer did between a read and that batch. */
function racedEnv(before: () => Promise<unknown>) {
  let pending: (() => Promise<unknown>) | null = before;
  const DB = new Proxy(env.DB, {
    get(target, prop) {
      if (prop === "batch")
        return async (statements: D1PreparedStatement[]) => {
          const run = pending;
          pending = null;
          await run?.();
          return target.batch(statements);
        };
      const value = Reflect.get(target, prop);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  return { ...env, DB };
}

describe("the abandoned-upload sweep racing a completion", () => {
  async function oldUpload() {
    const bytes = bytesOf(5000, 7);
    const img = await register({
      name: imageName(),
      version: "1",
      kind: "tarball",
      digest: await digestOf(bytes),
      size: 5000,
    });
    expect((await putPart(img.json.id, 1, bytes)).status).toBe(200);
    const now = Date.now();
    await env.DB.prepare("UPDATE images SET created_at = ? WHERE id = ?")
      .bind(now - ABANDONED_UPLOAD_MS - 1000, img.json.id)
      .run();
    return { id: img.json.id as string, now };
  }

  it("leaves an upload that completed after the sweep read it: the image stays ready, its bytes owed no delete", async () => {
    const { id, now } = await oldUpload();
    expect((await call("POST", `/v1/images/${id}/complete`)).status).toBe(200);
    // The sweep read it while it was still uploading; the completion committed before the sweep's batch.
    await env.DB.prepare("UPDATE images SET state = 'uploading' WHERE id = ?").bind(id).run();
    const swept = racedEnv(() => env.DB.prepare("UPDATE images SET state = 'ready' WHERE id = ?").bind(id).run());
    expect((await sweepImages(swept, now)).abandoned).toBe(0);
    expect((await call("GET", `/v1/images/${id}`)).json.state).toBe("ready");
    const owed = await env.DB.prepare("SELECT count(*) AS n FROM image_deletions WHERE key = ?")
      .bind(`images/${id}`)
      .first<{ n: number }>();
    expect(owed!.n).toBe(0);
    expect(await r2Head(id)).not.toBeNull();
    const audit = await call("GET", `/v1/audit?target=image:${id}`);
    expect(audit.json.items.map((e: any) => e.action)).not.toContain("image.upload_abandoned");
  });
});

describe("a completion racing the abandoned-upload sweep", () => {
  it("is answered 404 when the sweep forgot the upload first, not as a ready image", async () => {
    const bytes = bytesOf(5000, 9);
    const img = await register({
      name: imageName(),
      version: "1",
      kind: "tarball",
      digest: await digestOf(bytes),
      size: 5000,
    });
    const id = img.json.id as string;
    expect((await putPart(id, 1, bytes)).status).toBe(200);
    // The sweep forgets the row between the completion's read and its last batch.
    const raced = racedEnv(() =>
      env.DB.batch([
        env.DB.prepare("DELETE FROM image_parts WHERE image_id = ?").bind(id),
        env.DB.prepare("DELETE FROM images WHERE id = ?").bind(id),
      ]),
    );
    await expect(completeUpload(raced, "token:test", id)).rejects.toMatchObject({ code: "not_found" });
    const audit = await call("GET", `/v1/audit?target=image:${id}`);
    expect(audit.json.items.map((e: any) => e.action)).not.toContain("image.upload_complete");
  });
});

describe("two completions of one upload whose bytes are not the registered ones", () => {
  it("both get the refusal, and the log one row for it", async () => {
    const bytes = bytesOf(4096, 21);
    const registered = await digestOf(bytesOf(4096, 22));
    const reg = await register({ name: imageName(), version: "1", kind: "tarball", digest: registered, size: 4096 });
    const id = reg.json.id as string;
    expect((await putPart(id, 1, bytes)).status).toBe(200);
    // Both read the assembled object (so both find the digest wrong) before either forgets the image.
    let arrived = 0;
    let bothRead!: () => void;
    const both = new Promise<void>((res) => (bothRead = res));
    const images = new Proxy(env.IMAGES, {
      get(target, prop) {
        if (prop !== "get") return Reflect.get(target, prop).bind(target);
        return async (key: string) => {
          if (++arrived === 2) bothRead();
          await both;
          return target.get(key);
        };
      },
    });
    const raced = { ...env, IMAGES: images } as typeof env;
    const answers = await Promise.allSettled([
      completeUpload(raced, "token:test", id),
      completeUpload(raced, "token:test", id),
    ]);
    expect(arrived).toBe(2);
    for (const a of answers) expect(a).toMatchObject({ status: "rejected", reason: { code: "digest_mismatch" } });
    const rows = await env.DB.prepare("SELECT count(*) AS n FROM audit_log WHERE target = ? AND action = ?")
      .bind(`image:${id}`, "image.upload_refused")
      .first<{ n: number }>();
    expect(rows!.n).toBe(1);
    // A completion sent again still gets the refusal.
    const again = await call("POST", `/v1/images/${id}/complete`);
    expect([again.status, again.json.error.code]).toEqual([422, "digest_mismatch"]);
  });
});
