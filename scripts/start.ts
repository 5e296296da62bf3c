#!/usr/bin/env node
// `npm start`: local D1 migrated, ADMIN_TOKEN in .dev.vars, wrangler dev on 127.0.0.1, and the
// scheduled handler fired every minute as the deployed cron would (`npm start -- --no-cron` turns
// that off). Other arguments go to `wrangler dev`. Run by the pinned Node (>= 22.18), which strips
// the types itself: no build step, no loader.
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";

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

const wrangler = resolve(root, "node_modules/.bin/wrangler");
const LOCAL_PARK_TRUST_S = 30;
const migrate = spawnSync(wrangler, ["d1", "migrations", "apply", "DB", "--local"], {
  cwd: root,
  stdio: "inherit",
  env: { ...process.env, CI: "true" },
});
if (migrate.status !== 0) process.exit(migrate.status ?? 1);

// `--test-scheduled` exposes /__scheduled, which runs the worker's scheduled handler.
// wrangler dev never tells the worker that a client went away (docs/fleetlock.md, "Places are
// durable"): parked FleetLock requests are believed for LOCAL_PARK_TRUST_S only.
// Webhooks and external gate checks may reach a receiver on this machine over plain HTTP.
// A line per request locally, as before the deployed default became "writes" (wrangler.toml).
const local = ["--var", `PARK_TRUST_S:${LOCAL_PARK_TRUST_S}`, "--var", "ALLOW_LOOPBACK_HTTP:1", "--var", "ACCESS_LOG:on"];
const dev = spawn(
  wrangler,
  ["dev", "--ip", "127.0.0.1", "--port", port, ...local, ...(cron && !devArgs.includes("--test-scheduled") ? ["--test-scheduled"] : []), ...devArgs],
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
  if (other.length) console.warn(`npm start fires every minute; these crons are fired every minute too: ${other.join(", ")}`);
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
