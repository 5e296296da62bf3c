/**
 * The agent's own version. The packaged build (scripts/agent/build.ts) replaces
 * `process.env.HARBORMASTER_AGENT_BUILD_VERSION` with the version it builds (esbuild `define`), so
 * the executable carries it; run from the checkout (`node agent/cli/main.ts`), it is package.json's.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";

function fromCheckout(): string {
  try {
    return (JSON.parse(readFileSync(join(import.meta.dirname, "../../package.json"), "utf8")) as { version: string })
      .version;
  } catch {
    return "0.0.0-unknown";
  }
}

export const AGENT_VERSION: string = process.env.HARBORMASTER_AGENT_BUILD_VERSION || fromCheckout();

/** The name the agent reports itself under, and the catalog image name of its builds. */
export const AGENT_NAME = "harbormaster-agent";
