import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join, resolve } from "node:path";

export interface Connection {
  url: string;
  token: string;
  /** Where the token came from, for `hm status` and error messages. */
  source: "flags" | "environment" | "config file" | ".dev.vars";
}

export const DEFAULT_LOCAL_URL = "http://127.0.0.1:8787";

/** `$HM_CONFIG`, else `$XDG_CONFIG_HOME/harbormaster/config.json`, else `~/.config/harbormaster/config.json`. */
export function configPath(env: Record<string, string | undefined> = process.env): string {
  if (env.HM_CONFIG) return resolve(env.HM_CONFIG);
  const base = env.XDG_CONFIG_HOME || join(homedir(), ".config");
  return join(base, "harbormaster", "config.json");
}

export function readConfig(path: string): { url?: string; token?: string } | null {
  if (!existsSync(path)) return null;
  try {
    return JSON.parse(readFileSync(path, "utf8"));
  } catch {
    throw new UsageError(`cannot read ${path}: not JSON (run 'hm login' again)`);
  }
}

/** Writes the config readable by its owner only: it holds a bearer token. */
export function writeConfig(path: string, config: { url: string; token: string }) {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  writeFileSync(path, JSON.stringify(config, null, 2) + "\n", { mode: 0o600 });
  // The mode above applies only when the file is created; an older file is tightened too.
  chmodSync(path, 0o600);
}

/** The ADMIN_TOKEN `npm start` keeps in .dev.vars, looked for from `cwd` upwards. */
export function devVarsToken(cwd: string): string | null {
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
 * Flags, then HM_URL/HM_TOKEN, then the file `hm login` wrote, then a local `npm start`:
 * http://127.0.0.1:8787 (PORT honoured) with the ADMIN_TOKEN from .dev.vars.
 */
export function resolveConnection(
  flags: { url?: string; token?: string },
  env: Record<string, string | undefined> = process.env,
  cwd = process.cwd(),
): Connection {
  const file = readConfig(configPath(env));
  const url = flags.url ?? env.HM_URL ?? file?.url ?? `http://127.0.0.1:${env.PORT ?? "8787"}`;
  if (flags.token) return { url, token: flags.token, source: "flags" };
  if (env.HM_TOKEN) return { url, token: env.HM_TOKEN, source: "environment" };
  if (file?.token) return { url, token: file.token, source: "config file" };
  const dev = devVarsToken(cwd);
  if (dev) return { url, token: dev, source: ".dev.vars" };
  throw new UsageError("no token: pass --token, set HM_TOKEN, run 'hm login', or run from a checkout whose .dev.vars has ADMIN_TOKEN");
}
