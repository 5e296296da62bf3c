#!/usr/bin/env node
// `npm start`: local D1 migrated, ADMIN_TOKEN in .dev.vars, wrangler dev on 127.0.0.1.
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";

const root = resolve(import.meta.dirname, "..");
const devVars = resolve(root, ".dev.vars");
const port = process.env.PORT ?? "8787";

const current = existsSync(devVars) ? readFileSync(devVars, "utf8") : "";
if (!/^ADMIN_TOKEN=/m.test(current)) {
  const token = process.env.ADMIN_TOKEN ?? randomBytes(24).toString("base64url");
  const sep = current && !current.endsWith("\n") ? "\n" : "";
  writeFileSync(devVars, `${current}${sep}ADMIN_TOKEN=${token}\n`, { mode: 0o600 });
  console.log(`Wrote ADMIN_TOKEN to ${devVars} (${process.env.ADMIN_TOKEN ? "from the environment" : "random"}).`);
}
console.log(`The bootstrap admin token is in ${devVars} (ADMIN_TOKEN=...).`);

const wrangler = resolve(root, "node_modules/.bin/wrangler");
const migrate = spawnSync(wrangler, ["d1", "migrations", "apply", "DB", "--local"], {
  cwd: root,
  stdio: "inherit",
  env: { ...process.env, CI: "true" },
});
if (migrate.status !== 0) process.exit(migrate.status ?? 1);

const dev = spawn(wrangler, ["dev", "--ip", "127.0.0.1", "--port", port, ...process.argv.slice(2)], {
  cwd: root,
  stdio: "inherit",
});
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => dev.kill(sig));
dev.on("exit", (code) => process.exit(code ?? 0));
