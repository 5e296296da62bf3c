import { join } from "node:path";
import { Readable } from "node:stream";
import { main } from "../cli/main.ts";

export interface HmOptions {
  stdin?: string;
  env?: Record<string, string>;
  cwd?: string;
  /** false: no HM_URL / HM_TOKEN (what resolves the connection is then the test's business). */
  auth?: boolean;
  fetch?: typeof fetch;
}

/**
 * hm run in-process against the e2e server: argv and stdin text in; exit code, stdout, stderr
 * out. `home` holds its (absent) config file unless a test names another.
 */
export const hmRunner = (url: string, admin: string, home: string) =>
  async function hm(args: string[], opts: HmOptions = {}) {
    let stdout = "";
    let stderr = "";
    const env: Record<string, string | undefined> = {
      HM_CONFIG: join(home, "none.json"),
      ...(opts.auth === false ? {} : { HM_URL: url, HM_TOKEN: admin }),
      ...opts.env,
    };
    const code = await main(args, {
      stdout: (s) => void (stdout += s),
      stderr: (s) => void (stderr += s),
      stdin: Readable.from(opts.stdin === undefined ? [] : [opts.stdin]),
      interactive: false,
      env,
      cwd: opts.cwd ?? home,
      fetch: opts.fetch,
    });
    if (process.env.HM_TEST_DEBUG) console.log(args.join(" "), code, stderr);
    return { code, stdout, stderr, json: () => JSON.parse(stdout) };
  };
