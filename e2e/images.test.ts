import { createHash, randomBytes } from "node:crypto";
import { createReadStream, createWriteStream, mkdtempSync, rmSync } from "node:fs";
import { open } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { adminApi, hmRunner } from "./harness.ts";

const url = inject("hmUrl");
const hm = hmRunner("images");
const dir = mkdtempSync(join(tmpdir(), "hm-images-"));
const file = join(dir, "image.tar");
/** 200 MB, not a multiple of the 50 MiB parts: the last part is short. */
const SIZE = 200_000_000;
let digest = "";

async function sha256(stream: AsyncIterable<Buffer | Uint8Array>) {
  const hash = createHash("sha256");
  for await (const chunk of stream) hash.update(chunk);
  return `sha256:${hash.digest("hex")}`;
}

beforeAll(async () => {
  const out = createWriteStream(file);
  const block = randomBytes(1 << 20);
  for (let written = 0; written < SIZE; written += block.length) {
    const n = Math.min(block.length, SIZE - written);
    // Each MiB differs, so a part uploaded at the wrong offset changes the digest.
    block.writeUInt32BE(written, 0);
    if (!out.write(Buffer.from(block.subarray(0, n)))) await new Promise<void>((r) => out.once("drain", () => r()));
  }
  await new Promise<void>((r) => out.end(() => r()));
  digest = await sha256(createReadStream(file));
}, 120_000);

afterAll(() => rmSync(dir, { recursive: true, force: true }));

const hostGet = (path: string, token: string, headers: Record<string, string> = {}) =>
  fetch(`${url}${path}`, { headers: { authorization: `Bearer ${token}`, ...headers } });

describe("hm images push and a host's download", () => {
  it("resumes an interrupted push, stores the local file's digest, and serves it to the server that wants it, whole and by Range", async () => {
    const name = `e2e-img-${Date.now().toString(36)}`;
    // An earlier push that registered and sent part 1, then lost its connection.
    const reg = await adminApi("POST", "/v1/images", { name, version: "1.0.0", kind: "tarball", digest, size: SIZE });
    expect(reg.status).toBe(201);
    const parts = reg.json.upload.parts as number;
    const partSize = reg.json.upload.part_size as number;
    expect(parts).toBe(Math.ceil(SIZE / partSize));
    const first = await fetch(`${url}/v1/images/${reg.json.id}/parts/1`, {
      method: "PUT",
      headers: {
        authorization: `Bearer ${inject("hmAdmin")}`,
        "content-type": "application/octet-stream",
        "content-length": String(partSize),
      },
      body: Readable.toWeb(createReadStream(file, { start: 0, end: partSize - 1 })) as ReadableStream,
      duplex: "half",
    } as RequestInit);
    expect(first.status).toBe(200);

    const push = await hm(["images", "push", name, "1.0.0", file, "--kind", "tarball"]);
    expect(push.code, push.stderr).toBe(0);
    expect(push.stderr).toContain(`resuming: 1 of ${parts} parts already uploaded`);
    expect(push.stdout).toContain(`${name} 1.0.0 ready: ${reg.json.id}`);
    const shown = await hm(["--json", "images", "show", reg.json.id]);
    expect(shown.json()).toMatchObject({ digest, size: SIZE, state: "ready" });
    const listed = await hm(["images", "ls", "--name", name]);
    expect(listed.stdout).toContain(name);

    // A fleet that takes only catalog images; a server whose desired config names this one.
    const fleet = `e2e-img-${Date.now().toString(36)}`;
    expect((await adminApi("POST", "/v1/fleets", { id: fleet, image_policy: "catalog" })).status).toBe(201);
    const server = (await adminApi("POST", "/v1/servers", { fleet, hostname: "img-host.example.com", kind: "managed" }))
      .json;
    const other = (
      await adminApi("POST", "/v1/servers", { fleet, hostname: "other-host.example.com", kind: "managed" })
    ).json;
    const put = await adminApi("PUT", `/v1/servers/${server.id}/desired`, {
      generation: 2,
      agents: [{ name, image: name, version: "1.0.0" }],
    });
    expect(put.status).toBe(200);
    const desired = (await (await hostGet("/v1/agent/desired", server.token)).json()) as any;
    const agent = desired.agents[0];
    expect(agent).toMatchObject({ image_id: reg.json.id, digest, size: SIZE, kind: "tarball" });

    const whole = await hostGet(agent.source.blob, server.token);
    expect(whole.status).toBe(200);
    expect(whole.headers.get("etag")).toBe(`"${digest}"`);
    expect(whole.headers.get("content-length")).toBe(String(SIZE));
    expect(await sha256(Readable.fromWeb(whole.body as never))).toBe(digest);

    const [from, to] = [123_456_789, 123_456_789 + 3 * 1024 * 1024 - 1];
    const ranged = await hostGet(agent.source.blob, server.token, { range: `bytes=${from}-${to}` });
    expect(ranged.status).toBe(206);
    expect(ranged.headers.get("content-range")).toBe(`bytes ${from}-${to}/${SIZE}`);
    const got = Buffer.from(await ranged.arrayBuffer());
    const want = Buffer.alloc(to - from + 1);
    const fh = await open(file);
    await fh.read(want, 0, want.length, from);
    await fh.close();
    expect(got.equals(want)).toBe(true);

    // Another server's token: 404; an operator token: 403.
    expect((await hostGet(agent.source.blob, other.token)).status).toBe(404);
    expect((await hostGet(agent.source.blob, inject("hmAdmin"))).status).toBe(403);
  }, 600_000);

  it("refuses a read token's push and a rollout to an image the catalog lacks", async () => {
    const read = (await adminApi("POST", "/v1/tokens", { name: "e2e read", scope: "read" })).json.token;
    const pushed = await fetch(`${url}/v1/images`, {
      method: "POST",
      headers: { authorization: `Bearer ${read}`, "content-type": "application/json" },
      body: JSON.stringify({ name: "x", version: "1", kind: "tarball", digest: `sha256:${"0".repeat(64)}`, size: 1 }),
    });
    expect(pushed.status).toBe(403);
    const fleet = `e2e-noimg-${Date.now().toString(36)}`;
    await adminApi("POST", "/v1/fleets", { id: fleet, image_policy: "catalog" });
    const r = await hm([
      "rollout",
      "start",
      "--fleet",
      fleet,
      "--agent",
      "web",
      "--image",
      "web",
      "--version",
      "9.9.9",
    ]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain("image_not_found");
  });
});
