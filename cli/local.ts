/**
 * The local server record: where `npm start` serves and its admin token, kept in the checkout's
 * gitignored `.wrangler/hm-local.json` (wrangler's own state directory sits beside it). A new
 * shell in the repository then needs nothing exported: hm, `npm run sim` and the docs' shell
 * blocks find the server through it. Not `.dev.vars`: every line there becomes a variable of the
 * worker itself.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";

const LOCAL_RECORD = ".wrangler/hm-local.json";

export interface LocalRecord {
  url: string;
  token: string;
  /** The process of `npm start` that wrote it (it may have ended since). */
  pid?: number;
  started_at?: string;
}

export interface FoundRecord extends LocalRecord {
  /** The file it was read from. */
  path: string;
}

/**
 * The record for `cwd`: `$HM_LOCAL_RECORD` if set (a file, for tests and scripts that run a
 * server elsewhere), else `.wrangler/hm-local.json` in `cwd` or the nearest directory above it.
 * A file that is not a record is ignored, as if absent.
 */
export function findLocalRecord(
  cwd: string,
  env: Record<string, string | undefined> = process.env,
): FoundRecord | null {
  if (env.HM_LOCAL_RECORD) return readRecord(resolve(cwd, env.HM_LOCAL_RECORD));
  let dir = resolve(cwd);
  for (;;) {
    const found = readRecord(join(dir, LOCAL_RECORD));
    if (found) return found;
    const parent = dirname(dir);
    if (parent === dir) return null;
    dir = parent;
  }
}

function readRecord(path: string): FoundRecord | null {
  if (!existsSync(path)) return null;
  try {
    const r = JSON.parse(readFileSync(path, "utf8")) as Partial<LocalRecord>;
    if (typeof r.url !== "string" || typeof r.token !== "string" || !r.url || !r.token) return null;
    return { ...r, url: r.url, token: r.token, path };
  } catch {
    return null;
  }
}

/** Writes the record readable by its owner only: it holds the admin token. */
export function writeLocalRecord(root: string, record: LocalRecord): string {
  const path = join(root, LOCAL_RECORD);
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, JSON.stringify(record, null, 2) + "\n", { mode: 0o600 });
  return path;
}
