import { getDb } from "../db/client";
import { DomainError } from "../domain/errors";
import { imageKey } from "../domain/images";
import type { Env } from "../env";

const bucket = (env: Env) => env.IMAGES;
import { unwrap } from "../objects/kit/result";
import { ledgerOf } from "../objects/stubs";
import { imageById } from "./store";

/** One `bytes=` range of a `size`-byte body, or null to send it whole (absent, or several ranges). */
function rangeOf(header: string | undefined, size: number): { offset: number; length: number } | null {
  if (!header) return null;
  const m = /^bytes=(\d*)-(\d*)$/.exec(header.trim());
  if (!m) {
    if (header.trim().startsWith("bytes=") && header.includes(",")) return null;
    throw new DomainError("range_not_satisfiable", `Range '${header}' is not one 'bytes=' range`, { size });
  }
  const [, a, b] = m;
  if (a === "" && b === "")
    throw new DomainError("range_not_satisfiable", `Range '${header}' names no bytes`, { size });
  if (a === "") {
    const suffix = Math.min(Number(b), size);
    if (suffix === 0) throw new DomainError("range_not_satisfiable", `Range '${header}' names no bytes`, { size });
    return { offset: size - suffix, length: suffix };
  }
  const start = Number(a);
  const end = b === "" ? size - 1 : Math.min(Number(b), size - 1);
  if (start >= size || end < start)
    throw new DomainError("range_not_satisfiable", `Range '${header}' is outside the ${size} bytes`, { size });
  return { offset: start, length: end - start + 1 };
}

/**
 * GET /v1/agent/images/{id}/blob: a host's download of a stored image its own desired config
 * names (its ledger checks the token and says what the config names), whole or by one range.
 */
export async function blobForHost(
  env: Env,
  host: { serverId: string; tokenHash: string },
  id: string,
  headers: { range?: string; ifNoneMatch?: string },
) {
  const answer = unwrap(await ledgerOf(env, host.serverId).agentDesired(host.tokenHash, null));
  const named = !answer.notModified && answer.config.agents.some((a) => a.image_id === id);
  const gone = () => new DomainError("not_found", `image ${id} is not in this server's desired config`);
  if (!named) throw gone();
  const row = await imageById(getDb(env.DB), id);
  if (!row || row.state !== "ready" || row.kind === "oci-ref") throw gone();
  const etag = `"${row.digest}"`;
  // Weak comparison (RFC 9110 §13.1.2), as src/http/conditional.ts reads If-None-Match: W/"x" matches "x".
  const tags = headers.ifNoneMatch?.split(",").map((t) => t.trim().replace(/^W\//, "")) ?? [];
  if (tags.some((t) => t === etag || t === "*")) {
    return { kind: "not_modified" as const, etag };
  }
  const range = rangeOf(headers.range, row.size);
  const object = await bucket(env).get(imageKey(id), range ? { range } : undefined);
  if (!object) throw gone();
  return { kind: "body" as const, etag, size: row.size, range, body: object.body };
}
