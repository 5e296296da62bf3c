import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { sendAuditEvents } from "../src/audit/events.service";
import type { Env } from "../src/env";
import { updateFleet } from "../src/fleets/service";
import { THROTTLE_MS } from "../src/notices/notices";
import { createFleet } from "./helpers";
import { sleep } from "./support/objects";

/** The env with every fleet's ConsoleFeed replaced by one that records what it is told. */
function feedsHeard(dies = false) {
  const heard: string[] = [];
  const fake = {
    ...env,
    FEED: {
      idFromName: (fleet: string) => fleet,
      // `dies`: the call goes out and the Worker sending it dies before the feed is told.
      get: (fleet: string) => ({
        notify: () => (dies ? new Promise(() => {}) : Promise.resolve(void heard.push(fleet))),
      }),
    },
  } as unknown as Env;
  return { heard, env: fake };
}

/**
 * A D1-only service (fleet settings, intent, a spec's apply) tells the console's pages after its
 * write, in the request's background work, with its retries in memory: a Worker that dies there
 * (kill -9, an eviction) takes the notice with it, and nothing else would send one until the fleet's
 * next change. The cron's audit tick, which reads every new audit row after its cursor, tells the
 * fleets whose own rows (the services' changes) it found.
 */
describe("a service's console notice lost with its Worker", () => {
  it("reaches the fleet's pages on the cron's next audit tick", async () => {
    const { id: fleet } = await createFleet();
    // The cursor starts at the present on the first tick.
    await sendAuditEvents(env, Date.now());
    const lost = feedsHeard(true);
    // The change is committed; its background notice never runs (the Worker died after the answer).
    await updateFleet(lost.env, { waitUntil: () => {} }, "token:test", fleet, { stale_after_s: 123 });
    expect(lost.heard).toEqual([]);

    await sleep(THROTTLE_MS + 50);
    const tick = feedsHeard();
    await sendAuditEvents(tick.env, Date.now());
    expect(tick.heard).toEqual([fleet]);
  });

  it("is not sent again by a tick that finds no new rows of the fleet", async () => {
    const { id: fleet } = await createFleet();
    await sendAuditEvents(env, Date.now());
    await sleep(THROTTLE_MS + 50);
    const tick = feedsHeard();
    await sendAuditEvents(tick.env, Date.now());
    expect(tick.heard).not.toContain(fleet);
  });
});
