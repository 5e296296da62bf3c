import type { TestProject } from "vitest/node";
import { startLocalServer } from "../scripts/local-server.ts";

declare module "vitest" {
  export interface ProvidedContext {
    hmUrl: string;
    hmAdmin: string;
  }
}

export default async function setup(project: TestProject) {
  const server = await startLocalServer({ label: "e2e" });
  project.provide("hmUrl", server.url);
  project.provide("hmAdmin", server.admin);
  return () => server.stop();
}
