/**
 * `hm login --sso`: OpenID sign-in through the browser with a loopback redirect (RFC 8252 §7.3).
 * hm listens on 127.0.0.1 on a random port, asks the server for the provider's URL, and waits for
 * the browser to come back with a one-time code, which it exchanges, with the PKCE verifier only
 * it holds, for a short-lived operator token. No long-lived token is written to the laptop.
 */
import { spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import type { FetchLike } from "../agent/http.ts";
import { Exit } from "./io.ts";

const WAIT_MS = 5 * 60_000;

const b64url = (b: Buffer) => b.toString("base64url");

export interface SsoToken {
  token: string;
  token_id: string;
  scope: string;
  fleets: "*" | string[];
  expires_at: string;
}

async function postJson(fetchImpl: FetchLike, url: string, body: unknown) {
  const res = await fetchImpl(url, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json" },
    body: JSON.stringify(body),
  });
  const json = (await res.json().catch(() => null)) as any;
  if (!res.ok) {
    const e = json?.error;
    throw new Exit(1, `${e?.code ?? res.status}: ${e?.message ?? "the server refused the sign-in"}`);
  }
  return json;
}

/** Tries the desktop's opener; the URL is printed either way, for a terminal without a browser. */
function openBrowser(url: string) {
  const cmd = process.platform === "darwin" ? "open" : process.platform === "win32" ? "explorer" : "xdg-open";
  try {
    spawn(cmd, [url], { stdio: "ignore", detached: true })
      .on("error", () => {})
      .unref();
  } catch {
    // No opener: the printed URL is the way.
  }
}

export async function ssoLogin(
  base: string,
  opts: { fetch: FetchLike; say: (s: string) => void; open: boolean; waitMs?: number },
): Promise<SsoToken> {
  const verifier = b64url(randomBytes(32));
  const challenge = b64url(createHash("sha256").update(verifier).digest());
  let settle!: (code: string | Error) => void;
  const arrived = new Promise<string | Error>((resolve) => (settle = resolve));
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://127.0.0.1");
    const code = url.searchParams.get("code");
    if (url.pathname !== "/callback" || !code) {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found");
      return;
    }
    res
      .writeHead(200, { "content-type": "text/html; charset=utf-8", "cache-control": "no-store" })
      .end("<!doctype html><title>Signed in</title><p>Signed in: back to hm, you can close this tab.</p>");
    settle(code);
  });
  await new Promise<void>((resolve, reject) => server.once("error", reject).listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  const timer = setTimeout(
    () => settle(new Exit(1, "no sign-in came back within 5 minutes: run hm login --sso again")),
    opts.waitMs ?? WAIT_MS,
  );
  try {
    const { url } = (await postJson(opts.fetch, `${base}/v1/sso/cli/start`, {
      redirect_uri: `http://127.0.0.1:${port}/callback`,
      code_challenge: challenge,
    })) as { url: string };
    opts.say(`Sign in in your browser:\n  ${url}\n`);
    if (opts.open) openBrowser(url);
    const code = await arrived;
    if (code instanceof Error) throw code;
    return (await postJson(opts.fetch, `${base}/v1/sso/cli/exchange`, { code, code_verifier: verifier })) as SsoToken;
  } finally {
    clearTimeout(timer);
    server.close();
    server.closeAllConnections();
  }
}
