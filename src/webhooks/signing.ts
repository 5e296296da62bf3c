/**
 * Webhook signatures (docs/notifications.md has the receiver's recipe): HMAC-SHA256 with the
 * webhook's secret over `<unix seconds>.<raw body>`, sent as
 * `X-Harbormaster-Signature: t=<unix seconds>,v1=<hex digest>`. The timestamp is signed, so a
 * receiver that refuses signatures older than REPLAY_WINDOW_S cannot be fed an old delivery again.
 */
export const SIGNATURE_HEADER = "X-Harbormaster-Signature";
const REPLAY_WINDOW_S = 300;

const encoder = new TextEncoder();

async function hmacHex(secret: string, message: string): Promise<string> {
  const key = await crypto.subtle.importKey("raw", encoder.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, [
    "sign",
  ]);
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", key, encoder.encode(message)));
  return Array.from(mac, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** The header value for a body sent at `unixSeconds`. */
export async function signature(secret: string, body: string, unixSeconds: number): Promise<string> {
  return `t=${unixSeconds},v1=${await hmacHex(secret, `${unixSeconds}.${body}`)}`;
}

/** What a receiver does: the header's timestamp is recent and its digest is the body's. */
export async function verify(
  secret: string,
  body: string,
  header: string | null,
  nowS = Math.floor(Date.now() / 1000),
): Promise<boolean> {
  const parts = Object.fromEntries((header ?? "").split(",").map((kv) => kv.split("=", 2) as [string, string]));
  const t = Number(parts.t);
  if (!Number.isInteger(t) || Math.abs(nowS - t) > REPLAY_WINDOW_S || !parts.v1) return false;
  const expected = encoder.encode(await hmacHex(secret, `${t}.${body}`));
  const got = encoder.encode(parts.v1);
  return expected.byteLength === got.byteLength && crypto.subtle.timingSafeEqual(expected, got);
}
