#!/usr/bin/env node
// `npm run deploy` runs this first (npm's `pre` hook): refuse a configuration that cannot work,
// check what CI checks, then apply the D1 migrations to the remote database, because the code
// about to be deployed expects them (DDL first, then code; upgrade steps follow by themselves).
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";

const root = resolve(import.meta.dirname, "..");
const toml = readFileSync(resolve(root, "wrangler.toml"), "utf8");
const databaseId = /^database_id\s*=\s*"([^"]*)"/m.exec(toml)?.[1];
if (!databaseId || /^0{8}-0{4}-/.test(databaseId)) {
  console.error(
    "wrangler.toml still has the placeholder D1 database_id.\n" +
      "Create the database with `npx wrangler d1 create harbormaster` and put the database_id it prints\n" +
      "into wrangler.toml ([[d1_databases]]), then run `npm run deploy` again.",
  );
  process.exit(1);
}

const run = (cmd: string, args: string[]) => {
  console.log(`\n> ${cmd} ${args.join(" ")}`);
  const r = spawnSync(cmd, args, { cwd: root, stdio: "inherit" });
  if (r.status !== 0) process.exit(r.status ?? 1);
};
run("npm", ["run", "types:check"]);
run("npm", ["run", "typecheck"]);
run("npm", ["run", "lint:openapi"]);
// Remote: asks for confirmation unless CI=true; applied migrations are skipped.
run(resolve(root, "node_modules/.bin/wrangler"), ["d1", "migrations", "apply", "DB", "--remote"]);
