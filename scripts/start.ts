#!/usr/bin/env node
// `npm start`: local D1 migrated, ADMIN_TOKEN in .dev.vars, wrangler dev on 127.0.0.1, and the
// scheduled handler fired every minute as the deployed cron would (`npm start -- --no-cron` turns
// that off). Other arguments go to `wrangler dev`. Run by the pinned Node (>= 22.18), which strips
// the types itself: no build step, no loader.
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { writeLocalRecord } from "../cli/local.ts";

const root = resolve(import.meta.dirname, "..");
const devVars = resolve(root, ".dev.vars");
const port = process.env.PORT ?? "8787";
const base = `http://127.0.0.1:${port}`;

const args = process.argv.slice(2);
const cron = !args.includes("--no-cron");
const devArgs = args.filter((a) => a !== "--no-cron");

const current = existsSync(devVars) ? readFileSync(devVars, "utf8") : "";
if (!/^ADMIN_TOKEN=/m.test(current)) {
  const token = process.env.ADMIN_TOKEN ?? randomBytes(24).toString("base64url");
  const sep = current && !current.endsWith("\n") ? "\n" : "";
  writeFileSync(devVars, `${current}${sep}ADMIN_TOKEN=${token}\n`, { mode: 0o600 });
  console.log(`Wrote ADMIN_TOKEN to ${devVars} (${process.env.ADMIN_TOKEN ? "from the environment" : "random"}).`);
}
console.log(`The bootstrap admin token is in ${devVars} (ADMIN_TOKEN=...).`);
const token = /^ADMIN_TOKEN=(.+)$/m
  .exec(readFileSync(devVars, "utf8"))![1]
  .trim()
  .replace(/^["']|["']$/g, "");
// Where this server is and its token, for a second terminal: hm, `npm run sim` and the docs'
// shell blocks read it (cli/local.ts), so nothing needs exporting there.
const record = writeLocalRecord(root, { url: base, token, pid: process.pid, started_at: new Date().toISOString() });
console.log(
  `hm, npm run sim and the guides in another terminal of this checkout find ${base} and the token through ${record}.`,
);

const wrangler = resolve(root, "node_modules/.bin/wrangler");
const LOCAL_PARK_TRUST_S = 30;
// wrangler redraws its migration table once per migration (hundreds of lines before "Ready"):
// its output is kept, one line said, and all of it shown only when applying fails.
const migrate = spawnSync(wrangler, ["d1", "migrations", "apply", "DB", "--local"], {
  cwd: root,
  encoding: "utf8",
  env: { ...process.env, CI: "true" },
});
if (migrate.status !== 0) {
  process.stdout.write(migrate.stdout ?? "");
  process.stderr.write(migrate.stderr ?? "");
  process.exit(migrate.status ?? 1);
}
console.log(migrationSummary(`${migrate.stdout}${migrate.stderr}`));

/** One line for wrangler's `d1 migrations apply` output: what was applied, or that none was due. */
function migrationSummary(output: string): string {
  if (/No migrations to apply/.test(output)) return "Local database: migrations up to date.";
  const applied = [...new Set([...output.matchAll(/(\d{4}_[\w.-]+\.sql)\s*│\s*✅/g)].map((m) => m[1]))].sort();
  if (!applied.length) return "Local database: migrations applied.";
  return `Local database: applied ${applied.length} migration(s), ${applied[0]}${applied.length > 1 ? ` … ${applied.at(-1)}` : ""}.`;
}

// `--test-scheduled` exposes /__scheduled, which runs the worker's scheduled handler.
// wrangler dev never tells the worker that a client went away (docs/fleetlock.md, "Places are
// durable"): parked FleetLock requests are believed for LOCAL_PARK_TRUST_S only.
// Webhooks and external gate checks may reach a receiver on this machine over plain HTTP.
// A line per request locally, as before the deployed default became "writes" (wrangler.toml).
const local = [
  "--var",
  `PARK_TRUST_S:${LOCAL_PARK_TRUST_S}`,
  "--var",
  "ALLOW_LOOPBACK_HTTP:1",
  "--var",
  "ACCESS_LOG:on",
];
const dev = spawn(
  wrangler,
  [
    "dev",
    "--ip",
    "127.0.0.1",
    "--port",
    port,
    ...local,
    ...(cron && !devArgs.includes("--test-scheduled") ? ["--test-scheduled"] : []),
    ...devArgs,
  ],
  { cwd: root, stdio: "inherit" },
);
for (const sig of ["SIGINT", "SIGTERM"] as const) process.on(sig, () => dev.kill(sig));
dev.on("exit", (code) => process.exit(code ?? 0));

/** The cron expressions wrangler.toml deploys (`[triggers] crons = [...]`). */
function configuredCrons(): string[] {
  const toml = readFileSync(resolve(root, "wrangler.toml"), "utf8");
  const m = /^crons\s*=\s*\[([^\]]*)\]/m.exec(toml);
  return m ? [...m[1].matchAll(/"([^"]+)"/g)].map((x) => x[1]) : [];
}

if (cron) {
  const crons = configuredCrons();
  const other = crons.filter((c) => c !== "* * * * *");
  if (other.length)
    console.warn(`npm start fires every minute; these crons are fired every minute too: ${other.join(", ")}`);
  const fire = async () => {
    for (const expr of crons) {
      try {
        const res = await fetch(`${base}/__scheduled?cron=${encodeURIComponent(expr)}`);
        await res.arrayBuffer();
        if (!res.ok) console.error(`[cron] ${expr}: scheduled handler answered ${res.status}`);
      } catch {
        // wrangler dev is not listening yet (or restarting); the next minute tries again.
      }
    }
  };
  // On each minute boundary, like the deployed cron; the first tick is the next full minute.
  const schedule = () => setTimeout(() => void fire().finally(schedule), 60_000 - (Date.now() % 60_000));
  schedule();
  console.log(`[cron] firing ${crons.join(", ")} every minute through ${base}/__scheduled (--no-cron turns it off)`);
}
