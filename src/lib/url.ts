/**
 * Where Harbormaster may send requests of its own (webhooks, external gate checks): HTTPS only,
 * except plain HTTP to this machine's loopback in local runs (ALLOW_LOOPBACK_HTTP), so a receiver
 * on 127.0.0.1 can be tried with `npm start`. Pure.
 */
const LOOPBACK = new Set(["127.0.0.1", "localhost", "[::1]"]);

/** Why the URL may not be called, or null. */
export function outboundUrlProblem(raw: string, allowLoopbackHttp: boolean): string | null {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return "is not an absolute URL";
  }
  if (url.username || url.password)
    return "must not carry credentials (put a secret in the path or use the webhook's signature)";
  if (url.protocol === "https:") return null;
  if (url.protocol === "http:" && allowLoopbackHttp && LOOPBACK.has(url.hostname)) return null;
  return allowLoopbackHttp
    ? "must be https:// (or http:// to 127.0.0.1, localhost or [::1] in local runs)"
    : "must be https://";
}
