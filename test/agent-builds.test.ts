import { describe, expect, it } from "vitest";
import { installedUnit } from "../src/agent-builds/install";
import { BASE, call, checkedFetch } from "./helpers";

const bytes = (n: number, seed = 1) => Uint8Array.from({ length: n }, (_, i) => (i * 31 + seed) & 0xff);
async function sha256(data: Uint8Array) {
  return [...new Uint8Array(await crypto.subtle.digest("SHA-256", data))]
    .map((b) => b.toString(16).padStart(2, "0"))
    .join("");
}

function publish(
  target: string,
  body: Uint8Array,
  headers: Record<string, string>,
  token: string | null = "test-admin-token",
) {
  return checkedFetch(`${BASE}/v1/agent/builds/${target}`, {
    method: "PUT",
    headers: {
      "Content-Type": "application/octet-stream",
      ...(token ? { Authorization: `Bearer ${token}` } : {}),
      ...headers,
    },
    body,
  });
}

describe("agent builds", () => {
  it("publishes a build and serves it byte for byte with its SHA-256, publicly", async () => {
    const missing = await checkedFetch(`${BASE}/v1/agent/download/linux-arm64.sha256`);
    expect(missing.status).toBe(404);
    const build = bytes(300_000);
    const sum = await sha256(build);
    const put = await publish("linux-arm64", build, { "X-Agent-Version": "1.2.3", "X-Checksum-Sha256": sum });
    expect(put.status).toBe(200);
    expect(await put.json()).toMatchObject({
      os: "linux",
      arch: "arm64",
      version: "1.2.3",
      sha256: sum,
      size: build.length,
      url: `${BASE}/v1/agent/download/linux-arm64`,
    });

    const got = await checkedFetch(`${BASE}/v1/agent/download/linux-arm64`);
    expect(got.status).toBe(200);
    expect(got.headers.get("X-Checksum-Sha256")).toBe(sum);
    expect(got.headers.get("ETag")).toBe(`"${sum}"`);
    expect(got.headers.get("X-Agent-Version")).toBe("1.2.3");
    const downloaded = new Uint8Array(await got.arrayBuffer());
    expect(downloaded.length).toBe(build.length);
    expect(await sha256(downloaded)).toBe(sum);

    const line = await checkedFetch(`${BASE}/v1/agent/download/linux-arm64.sha256`);
    expect(await line.text()).toBe(`${sum}  harbormaster-agent-linux-arm64\n`);
    const meta = await call("GET", "/v1/agent/builds/linux-arm64");
    expect(meta.json).toMatchObject({ version: "1.2.3", sha256: sum, published_by: "token:bootstrap" });
  });

  it("refuses a body whose SHA-256 is not the one sent, keeping the previous build", async () => {
    const good = bytes(1000, 7);
    const sum = await sha256(good);
    expect((await publish("linux-x64", good, { "X-Agent-Version": "1.0.0", "X-Checksum-Sha256": sum })).status).toBe(
      200,
    );
    const bad = await publish("linux-x64", bytes(1000, 8), { "X-Agent-Version": "1.0.1", "X-Checksum-Sha256": sum });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as any).error.message).toContain("SHA-256");
    const got = await checkedFetch(`${BASE}/v1/agent/download/linux-x64`);
    expect(got.headers.get("X-Agent-Version")).toBe("1.0.0");
    expect(await sha256(new Uint8Array(await got.arrayBuffer()))).toBe(sum);
  });

  it("takes a gzip-compressed build and stores the build itself; refuses one whose X-Agent-Size is wrong", async () => {
    const build = bytes(200_000, 3);
    const sum = await sha256(build);
    const gz = new Uint8Array(
      await new Response(new Blob([build]).stream().pipeThrough(new CompressionStream("gzip"))).arrayBuffer(),
    );
    expect(gz.length).toBeLessThan(build.length);
    const put = await publish("linux-x64", gz, {
      "Content-Encoding": "gzip",
      "X-Agent-Size": String(build.length),
      "X-Agent-Version": "3.0.0",
      "X-Checksum-Sha256": sum,
    });
    expect(put.status).toBe(200);
    expect(await put.json()).toMatchObject({ version: "3.0.0", sha256: sum, size: build.length });
    const got = await checkedFetch(`${BASE}/v1/agent/download/linux-x64`);
    expect(await sha256(new Uint8Array(await got.arrayBuffer()))).toBe(sum);

    const short = await publish("linux-x64", gz, {
      "Content-Encoding": "gzip",
      "X-Agent-Size": String(build.length + 1),
      "X-Agent-Version": "3.0.1",
      "X-Checksum-Sha256": sum,
    });
    expect(short.status).toBe(400);
    const noSize = await publish("linux-x64", gz, {
      "Content-Encoding": "gzip",
      "X-Agent-Version": "3.0.1",
      "X-Checksum-Sha256": sum,
    });
    expect(noSize.status).toBe(400);
    const notGzip = await publish("linux-x64", build.slice(0, 1000), {
      "Content-Encoding": "gzip",
      "X-Agent-Size": String(build.length),
      "X-Agent-Version": "3.0.1",
      "X-Checksum-Sha256": sum,
    });
    expect(notGzip.status).toBe(400);
    expect((await checkedFetch(`${BASE}/v1/agent/download/linux-x64`)).headers.get("X-Agent-Version")).toBe("3.0.0");
  });

  it("lets only an admin publish, needs the version and checksum, and knows only real targets", async () => {
    const build = bytes(10);
    const sum = await sha256(build);
    const write = (await call("POST", "/v1/tokens", { body: { name: "writer", scope: "write" } })).json.token;
    expect((await publish("linux-x64", build, { "X-Agent-Version": "1", "X-Checksum-Sha256": sum }, null)).status).toBe(
      401,
    );
    expect(
      (await publish("linux-x64", build, { "X-Agent-Version": "1", "X-Checksum-Sha256": sum }, write)).status,
    ).toBe(403);
    expect((await publish("linux-x64", build, { "X-Checksum-Sha256": sum })).status).toBe(400);
    expect((await publish("linux-x64", build, { "X-Agent-Version": "1", "X-Checksum-Sha256": "abc" })).status).toBe(
      400,
    );
    expect((await publish("windows-x64", build, { "X-Agent-Version": "1", "X-Checksum-Sha256": sum })).status).toBe(
      400,
    );
    expect((await checkedFetch(`${BASE}/v1/agent/download/plan9-mips`)).status).toBe(400);
    expect((await checkedFetch(`${BASE}/v1/agent/download/linux-x64.md5`)).status).toBe(400);
  });
});

describe("GET /install.sh", () => {
  it("is a public sh script naming this deployment and carrying the packaged unit, with no secret in it", async () => {
    const res = await checkedFetch(`${BASE}/install.sh`);
    expect(res.status).toBe(200);
    expect(res.headers.get("Content-Type")).toContain("text/x-shellscript");
    const script = await res.text();
    expect(script.startsWith("#!/bin/sh\n")).toBe(true);
    expect(script).toContain(`HM_URL='${BASE}'`);
    expect(script).toContain(installedUnit());
    expect(installedUnit()).toContain("ExecStart=/usr/local/bin/harbormaster-agent run");
    expect(script).not.toContain("test-admin-token");
    expect(script).not.toMatch(/hm[eos]\.[0-9a-f-]{36}\./);
    const other = await (await checkedFetch("https://fleet.example.org/install.sh")).text();
    expect(other).toContain("HM_URL='https://fleet.example.org'");
  });
});
