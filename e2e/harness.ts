/**
 * What the end-to-end tests share: hm run in-process against the suite's server, and plain JSON
 * calls to its API with the admin token.
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { inject } from "vitest";
import { main } from "../cli/main.ts";

/** Runs hm in-process with the suite's server and admin token: exit code, stdout, stderr. */
export function hmRunner(label: string) {
  const url = inject("hmUrl");
  const admin = inject("hmAdmin");
  const home = mkdtempSync(join(tmpdir(), `hm-${label}-`));
  return async function hm(args: string[]) {
    let stdout = "";
    let stderr = "";
    const code = await main(args, {
      stdout: (s) => void (stdout += s),
      stderr: (s) => void (stderr += s),
      stdin: Readable.from([]),
      interactive: false,
      env: { HM_CONFIG: join(home, "none.json"), HM_URL: url, HM_TOKEN: admin },
      cwd: home,
    });
    return { code, stdout, stderr, json: () => JSON.parse(stdout) };
  };
}

/** A JSON call to the suite's server with the admin token. */
export async function adminApi(method: string, path: string, body?: unknown) {
  const res = await fetch(`${inject("hmUrl")}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${inject("hmAdmin")}`,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json().catch(() => null)) as any };
}
