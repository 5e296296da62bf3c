import { env } from "cloudflare:test";
import { BASE, call, checkedFetch, uniq, ADMIN } from "./helpers";

export const MiB = 1024 * 1024;

/** Deterministic bytes: `n` of them from `seed`, so a test can make the same content twice. */
export function bytesOf(n: number, seed = 1) {
  const out = new Uint8Array(n);
  let x = seed * 2654435761;
  for (let i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    out[i] = x >>> 24;
  }
  return out;
}

export async function digestOf(bytes: Uint8Array) {
  const h = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return `sha256:${[...h].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
}

export const imageName = () => uniq("img").toLowerCase();

export async function register(body: Record<string, unknown>, token = ADMIN) {
  return call("POST", "/v1/images", { body, token });
}

export async function putPart(
  id: string,
  n: number,
  bytes: Uint8Array,
  headers: Record<string, string> = {},
  token = ADMIN,
) {
  const res = await checkedFetch(`${BASE}/v1/images/${id}/parts/${n}`, {
    method: "PUT",
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/octet-stream", ...headers },
    body: bytes,
  });
  return { status: res.status, json: (await res.json()) as any };
}

/** A stored image registered, uploaded in parts of `partSize` and completed. */
export async function storedImage(
  bytes: Uint8Array,
  opts: { name?: string; version?: string; partSize?: number; kind?: string } = {},
) {
  const partSize = opts.partSize ?? 5 * MiB;
  const reg = await register({
    name: opts.name ?? imageName(),
    version: opts.version ?? "1.0.0",
    kind: opts.kind ?? "tarball",
    digest: await digestOf(bytes),
    size: bytes.length,
    part_size: partSize,
  });
  if (reg.status !== 201) throw new Error(`register: ${reg.status} ${JSON.stringify(reg.json)}`);
  for (let n = 1; (n - 1) * partSize < bytes.length; n++) {
    const put = await putPart(reg.json.id, n, bytes.subarray((n - 1) * partSize, n * partSize));
    if (put.status !== 200) throw new Error(`part ${n}: ${put.status} ${JSON.stringify(put.json)}`);
  }
  const done = await call("POST", `/v1/images/${reg.json.id}/complete`);
  if (done.status !== 200) throw new Error(`complete: ${done.status} ${JSON.stringify(done.json)}`);
  return done.json as { id: string; name: string; version: string; digest: string; size: number };
}

export const r2Head = (id: string) => env.IMAGES.head(`images/${id}`);
