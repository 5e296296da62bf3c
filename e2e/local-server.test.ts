/**
 * The private local server (scripts/local-server.ts) that the benchmark, the crash check and these
 * tests start: its settings are its own whatever the caller exported, and the local entry (the
 * cost meter's) is there only when asked for.
 */
import { afterAll, describe, expect, inject, it } from "vitest";
import { startLocalServer, type LocalServer } from "../scripts/local-server.ts";

const servers: LocalServer[] = [];
afterAll(() => servers.forEach((s) => s.stop()));

const fleets = (base: string, token: string) =>
  fetch(`${base}/v1/fleets`, { headers: { Authorization: `Bearer ${token}` } });

describe("a private local server", () => {
  it("answers to the admin token it wrote for itself, not to an ADMIN_TOKEN the caller exported", async () => {
    const exported = process.env.ADMIN_TOKEN;
    process.env.ADMIN_TOKEN = "the-callers-own-admin-token";
    try {
      const server = await startLocalServer({ label: "e2e-env", metered: true });
      servers.push(server);
      expect(server.admin).not.toBe(process.env.ADMIN_TOKEN);
      expect((await fleets(server.url, server.admin)).status).toBe(200);
      expect((await fleets(server.url, process.env.ADMIN_TOKEN)).status).toBe(401);
      // Asked for the local entry: the meter's routes are there.
      expect((await fetch(`${server.url}/__local/meter`)).status).toBe(200);
    } finally {
      if (exported === undefined) delete process.env.ADMIN_TOKEN;
      else process.env.ADMIN_TOKEN = exported;
    }
    // A second wrangler dev beside the suite's own: on a loaded machine its start alone took over
    // the suite's 60 s (as the other suites that start one allow 180 s in their setup).
  }, 180_000);

  it("runs the deployed entry unless asked for the metered one: no local routes", async () => {
    const res = await fetch(`${inject("hmUrl")}/__local/meter`);
    expect(res.status).toBe(404);
    await res.arrayBuffer();
  });
});
