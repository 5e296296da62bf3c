/**
 * `harbormaster-agent join URL TOKEN`: enrolls this machine with an enrollment token (`hme.…`)
 * through `POST /v1/agent/enroll` and keeps the identity it answers (the server's own token) in
 * the state directory. Joined once, a second join changes nothing. A join whose answer was lost
 * (a crash, a dropped connection) is simply run again: the server answers the same machine_id with
 * the same server and a fresh token, the first one revoked.
 */
import { readFileSync } from "node:fs";
import { hostname as osHostname } from "node:os";
import { apiErrorOf, MAX_ERROR_BODY_BYTES, NO_REDIRECTS, textUpTo, type FetchLike } from "../http.ts";
import type { AgentConfig } from "./config.ts";
import { z } from "zod";
import type { Identity, StateDir } from "./state.ts";

export interface JoinOptions {
  url: string;
  token: string;
  hostname?: string;
  fleetlockId?: string;
  /** The machine's own labels (`--label zone=eu-1a`), merged by the server over the token's. */
  labels?: Record<string, string>;
  fetch?: FetchLike;
  now?: () => Date;
}

export type JoinResult = { joined: true; identity: Identity } | { joined: false; identity: Identity };

/** The first line of a file, trimmed (machine-id, boot_id). */
export function readId(file: string, what: string): string {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    throw new Error(`cannot read the ${what} from ${file}: ${(err as Error).message}`);
  }
  const id = text.split("\n")[0].trim();
  if (!id) throw new Error(`${file} holds no ${what}`);
  // What the server takes (src/enrollment/schemas.ts): another would have every report refused.
  if (!/^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/.test(id))
    throw new Error(
      `${file} does not hold a ${what}: 1-128 letters, digits, '_', '.', ':' and '-' were expected, not ${JSON.stringify(id.slice(0, 40))}${id.length > 40 ? "…" : ""}`,
    );
  return id;
}

/**
 * `--label k=v`, repeatable, into labels: the last value of a key wins, as in the enroll body's
 * merge over the token's. The shapes of keys and values are the server's to judge (it answers
 * which one is wrong); what cannot be a label at all is refused here, before anyone is called.
 */
export function parseLabels(terms: readonly string[]): Record<string, string> {
  // No prototype: `--label __proto__=x` is a key like any other (sent, and judged by the server),
  // not an assignment to the object's prototype that would drop the label without a word.
  const labels: Record<string, string> = Object.create(null);
  for (const term of terms) {
    const at = term.indexOf("=");
    if (at <= 0 || at === term.length - 1) throw new Error(`--label takes key=value (e.g. zone=eu-1a), not '${term}'`);
    labels[term.slice(0, at)] = term.slice(at + 1);
  }
  return labels;
}

function normalizeUrl(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new Error(`not a URL: ${url}`);
  }
  if (u.protocol !== "https:" && u.protocol !== "http:") throw new Error(`not an http(s) URL: ${url}`);
  return u.toString().replace(/\/+$/, "");
}

/** What POST /v1/agent/enroll answers (src/enrollment): what the identity is made of. */
const EnrollAnswer = z.object({
  id: z.string().min(1),
  fleet: z.string().min(1),
  hostname: z.string().min(1),
  token: z.string().min(1),
  reboot_group: z.string().optional(),
  fleetlock_id: z.string().nullable().optional(),
});

export async function join(state: StateDir, config: AgentConfig, opts: JoinOptions): Promise<JoinResult> {
  const existing = state.identity();
  if (existing) return { joined: false, identity: existing };
  if (!/^hme\.[^.\s]+\.[^.\s]+$/.test(opts.token))
    throw new Error("the enrollment token must look like hme.<id>.<secret>");
  const url = normalizeUrl(opts.url);
  const machineId = readId(config.machine_id_file, "machine id");
  const bootId = readId(config.boot_id_file, "boot id");
  const body = {
    hostname: opts.hostname ?? osHostname(),
    machine_id: machineId,
    boot_id: bootId,
    // The FleetLock id defaults to the machine id, as unique as the machine (Zincati derives its own from it).
    fleetlock_id: opts.fleetlockId ?? machineId,
    ...(opts.labels && Object.keys(opts.labels).length ? { labels: opts.labels } : {}),
  };
  const fetchImpl = opts.fetch ?? ((i, init) => fetch(i, init));
  const res = await fetchImpl(`${url}/v1/agent/enroll`, {
    ...NO_REDIRECTS,
    method: "POST",
    headers: { Authorization: `Bearer ${opts.token}`, "Content-Type": "application/json" },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(60_000),
  });
  if (!res.ok) throw await apiErrorOf(res);
  // Parsed before anything is written: a proxy or a captive portal answering 200 in the server's
  // place must leave no identity behind that names no server.
  // An enrollment is a few hundred bytes: a body past 64 KiB is not one, and is not read on.
  const text = await textUpTo(res, MAX_ERROR_BODY_BYTES);
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    throw new Error(
      `the answer from ${url} is not JSON (HTTP ${res.status}, ${res.headers.get("content-type") ?? "no content type"}): is it Harbormaster's URL?`,
    );
  }
  const parsed = EnrollAnswer.safeParse(raw);
  if (!parsed.success)
    throw new Error(
      `the answer from ${url} is not an enrollment: ${parsed.error.issues.map((i) => `${i.path.join(".") || "(the body)"}: ${i.message}`).join("; ")}`,
    );
  const answer = parsed.data;
  const identity: Identity = {
    url,
    server_id: answer.id,
    fleet: answer.fleet,
    hostname: answer.hostname,
    token: answer.token,
    reboot_group: answer.reboot_group ?? "default",
    fleetlock_id: answer.fleetlock_id ?? null,
    machine_id: machineId,
    joined_at: (opts.now?.() ?? new Date()).toISOString(),
  };
  state.write("identity.json", identity);
  return { joined: true, identity };
}
