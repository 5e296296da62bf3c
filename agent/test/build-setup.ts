/**
 * The agent suite's global set-up: builds harbormaster-agent (the SEA executable and its .deb,
 * scripts/agent/build.ts) once per run, into a temp dir, for the tests that run the real thing.
 * HARBORMASTER_AGENT_EXECUTABLE and HARBORMASTER_AGENT_DEB name a build to reuse instead (a
 * developer iterating on a test); the build is kept out of `npm test`'s path.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestProject } from "vitest/node";
import { buildAgent, packageVersion } from "../../scripts/agent/build.ts";

declare module "vitest" {
  export interface ProvidedContext {
    agentExecutable: string;
    agentDeb: string;
    agentVersion: string;
  }
}

export default async function setup(project: TestProject) {
  const reuse = process.env.HARBORMASTER_AGENT_EXECUTABLE;
  if (reuse) {
    project.provide("agentExecutable", reuse);
    project.provide("agentDeb", process.env.HARBORMASTER_AGENT_DEB ?? "");
    project.provide("agentVersion", process.env.HARBORMASTER_AGENT_VERSION ?? packageVersion());
    return;
  }
  const out = mkdtempSync(join(tmpdir(), "hm-agent-build-"));
  const built = await buildAgent({ outDir: out, log: () => {} });
  project.provide("agentExecutable", built.binary);
  project.provide("agentDeb", built.deb!);
  project.provide("agentVersion", built.version);
  return () => rmSync(out, { recursive: true, force: true });
}
