#!/usr/bin/env node
// `hm` (package.json bin; `npm link` in a checkout puts it on PATH). The CLI is TypeScript that
// Node runs itself by stripping its types (Node ≥ 22.18). Node refuses to strip files under
// node_modules, so hm runs from a checkout, not from a packed (npm install -g) copy.
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const cli = new URL("../cli/run.ts", import.meta.url);

if (process.features.typescript) {
  await import(cli.href);
} else {
  // The node on PATH is too old to strip types: the checkout's pinned Node (the `node`
  // devDependency) runs hm instead, with the same arguments, streams and exit code.
  const pinned = fileURLToPath(new URL("../node_modules/node/bin/node", import.meta.url));
  const child = spawnSync(pinned, [fileURLToPath(cli), ...process.argv.slice(2)], { stdio: "inherit" });
  if (child.error) {
    process.stderr.write(
      `hm needs Node ≥ 22.18 (this is ${process.version}), or \`npm ci\` in its checkout for the pinned one\n`,
    );
    process.exit(1);
  }
  process.exit(child.status ?? 1);
}
