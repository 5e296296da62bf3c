import { describe, expect, it } from "vitest";
import { call } from "./helpers";
import {
  AGENT,
  fleetWithAgent,
  getRollout,
  NEW,
  OLD,
  reconcileApplying,
  startRollout,
  targets,
} from "./rollout-helpers";

describe("a rollout through the HTTP API", () => {
  it("moves every target to the new image, concurrency at a time, and succeeds", async () => {
    const { fleet, hosts } = await fleetWithAgent(5);
    const r = await startRollout({ fleet, concurrency: 2 });
    expect(r.counts).toMatchObject({ queued: 3, applying: 2 });
    let rounds = 0;
    while ((await getRollout(r.id)).state === "running" && rounds++ < 10) {
      const n = await reconcileApplying(r.id, hosts);
      expect(n).toBeLessThanOrEqual(2);
    }
    const done = await getRollout(r.id);
    expect(done.state).toBe("succeeded");
    expect(done.counts).toMatchObject({ done: 5, queued: 0, applying: 0 });
    for (const h of hosts) {
      const s = await call("GET", `/v1/servers/${h.id}`);
      expect(s.json.desired.agents.find((a: any) => a.name === AGENT).image).toBe(NEW);
      expect(s.json.status).toBe("realized");
    }
    const ts = await targets(r.id);
    expect(ts.every((t) => t.from_image === OLD && t.image === NEW)).toBe(true);
  });
});
