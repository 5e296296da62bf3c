import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { findLocalRecord } from "./local.ts";

export interface Connection {
  url: string;
  token: string;
  /** Where the token came from, for `hm status` and error messages. */
  source: "flags" | "environment" | "config file" | "local server record" | ".dev.vars";
  /** The same, as a person reads it: "HM_TOKEN", "context 'prod'", "the local server record (…)". */
  tokenFrom: string;
  /** The context the URL and token came from, if any. */
  context?: string;
  /** Where the URL came from, for messages about reaching it. */
  urlFrom: string;
}

/** `$HM_CONFIG`, else `$XDG_CONFIG_HOME/harbormaster/config.json`, else `~/.config/harbormaster/config.json`. */
export function configPath(env: Record<string, string | undefined> = process.env): string {
  if (env.HM_CONFIG) return resolve(env.HM_CONFIG);
  const base = env.XDG_CONFIG_HOME || join(homedir(), ".config");
  return join(base, "harbormaster", "config.json");
}

/** One server and its token, by name; `current` is the one used when none is named. */
export interface Config {
  current: string | null;
  contexts: Record<string, ContextEntry>;
}

/** A context: a server, its token, and optionally the fleet fleet commands use without --fleet. */
interface ContextEntry {
  url: string;
  token: string;
  fleet?: string;
}

export const DEFAULT_CONTEXT = "default";

/** The config file, or null; a file from before contexts (`{url, token}`) is the context "default". */
export function readConfig(path: string): Config | null {
  if (!existsSync(path)) return null;
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, "utf8"));
  } catch {
    throw new UsageError(`cannot read ${path}: not JSON (run 'hm login' again)`);
  }
  const r = raw as Partial<Config> & { url?: string; token?: string };
  if (r.contexts && typeof r.contexts === "object") return { current: r.current ?? null, contexts: r.contexts };
  if (r.url && r.token)
    return { current: DEFAULT_CONTEXT, contexts: { [DEFAULT_CONTEXT]: { url: r.url, token: r.token } } };
  return { current: null, contexts: {} };
}

/** Writes the config readable by its owner only: it holds bearer tokens. */
export function writeConfig(path: string, config: Config) {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  writeFileSync(path, JSON.stringify(config, null, 2) + "\n", { mode: 0o600 });
  // The mode above applies only when the file is created; an older file is tightened too.
  chmodSync(path, 0o600);
}

/** The ADMIN_TOKEN `npm start` keeps in .dev.vars, looked for from `cwd` upwards. */
function devVarsToken(cwd: string): string | null {
  let dir = resolve(cwd);
  for (;;) {
    const file = join(dir, ".dev.vars");
    if (existsSync(file)) {
      const m = /^ADMIN_TOKEN=(.+)$/m.exec(readFileSync(file, "utf8"));
      if (m) return m[1].trim().replace(/^["']|["']$/g, "");
    }
    const parent = dirname(dir);
    if (parent === dir) return null;
    dir = parent;
  }
}

export class UsageError extends Error {}

/**
 * Flags, then HM_URL/HM_TOKEN, then the context (--context, HM_CONTEXT, else the config's
 * current one), then the local server record `npm start` writes (.wrangler/hm-local.json, found
 * from `cwd` upwards), then http://127.0.0.1:$PORT (8787) with the ADMIN_TOKEN from .dev.vars. A
 * context's or the record's token goes only to its own URL.
 */
export function resolveConnection(
  flags: { url?: string; token?: string; context?: string },
  env: Record<string, string | undefined> = process.env,
  cwd = process.cwd(),
): Connection {
  // An empty variable is an unset one (HM_URL= hm … must not mean the URL "").
  env = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== ""));
  const file = readConfig(configPath(env));
  const name = flags.context ?? env.HM_CONTEXT ?? file?.current ?? undefined;
  const context = name ? file?.contexts[name] : undefined;
  if ((flags.context ?? env.HM_CONTEXT) && !context) {
    throw new UsageError(
      `no context '${name}' in ${configPath(env)} (hm context list shows the known ones; hm login --name ${name} --url URL --token TOKEN adds it)`,
    );
  }
  const record = context ? null : findLocalRecord(cwd, env);
  const recordText = record ? `the local server record (${record.path}, written by npm start)` : "";
  const urlFrom = flags.url
    ? "--url"
    : env.HM_URL
      ? "HM_URL"
      : context
        ? `context '${name}'`
        : record
          ? recordText
          : `the local default (npm start; PORT=${env.PORT ?? "8787"})`;
  const url = checkUrl(
    flags.url ?? env.HM_URL ?? context?.url ?? record?.url ?? `http://127.0.0.1:${env.PORT ?? "8787"}`,
  );
  const base = { url, urlFrom, context: context && url === checkUrl(context.url) ? name : undefined };
  if (flags.token) return { ...base, token: flags.token, source: "flags", tokenFrom: "--token" };
  if (env.HM_TOKEN) return { ...base, token: env.HM_TOKEN, source: "environment", tokenFrom: "HM_TOKEN" };
  if (context && base.context)
    return {
      ...base,
      token: context.token,
      source: "config file",
      tokenFrom: `context '${name}' (${configPath(env)})`,
    };
  if (record && url === checkUrl(record.url))
    return { ...base, token: record.token, source: "local server record", tokenFrom: recordText };
  const dev = devVarsToken(cwd);
  if (dev) return { ...base, token: dev, source: ".dev.vars", tokenFrom: ".dev.vars (ADMIN_TOKEN)" };
  throw new UsageError(
    "no token: pass --token, set HM_TOKEN, run 'hm login', or run inside a checkout where npm start has run (it records its URL and token in .wrangler/hm-local.json)",
  );
}

/** The fleet fleet commands use without --fleet: HM_FLEET, else the context's (hm context set-fleet). */
export function defaultFleet(
  flags: { context?: string },
  env: Record<string, string | undefined> = process.env,
): { fleet: string; from: string } | null {
  if (env.HM_FLEET) return { fleet: env.HM_FLEET, from: "HM_FLEET" };
  const file = readConfig(configPath(env));
  const name = flags.context ?? (env.HM_CONTEXT || undefined) ?? file?.current ?? undefined;
  const fleet = name ? file?.contexts[name]?.fleet : undefined;
  return fleet ? { fleet, from: `context '${name}'` } : null;
}

/** An http(s) URL, or a usage error that says what is wrong with it (and what was probably meant). */
function checkUrl(url: string): string {
  const trimmed = url.trim().replace(/\/+$/, "");
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(trimmed)) {
    throw new UsageError(`the URL '${url}' has no scheme: did you mean http://${trimmed} (or https://)?`);
  }
  let parsed: URL;
  try {
    parsed = new URL(trimmed);
  } catch {
    throw new UsageError(`'${url}' is not a URL (expected e.g. http://127.0.0.1:8787)`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:")
    throw new UsageError(`the URL '${url}' must be http:// or https://`);
  return trimmed;
}
