import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { sendAuditEvents } from "../src/audit/events.service";
import type { Env } from "../src/env";
import { updateFleet } from "../src/fleets/service";
import { THROTTLE_MS } from "../src/notices/notices";
import { createFleet } from "./helpers";
import { getDb } from "../src/db/client";
import { auditEvent, auditInsert, auditInsertOnce } from "../src/db/audit";
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
    await (
      await sendAuditEvents(tick.env, Date.now())
    ).notices;
    expect(tick.heard).toEqual([fleet]);
  });

  it("is not sent again by a tick that finds no new rows of the fleet", async () => {
    const { id: fleet } = await createFleet();
    await sendAuditEvents(env, Date.now());
    await sleep(THROTTLE_MS + 50);
    const tick = feedsHeard();
    await (
      await sendAuditEvents(tick.env, Date.now())
    ).notices;
    expect(tick.heard).not.toContain(fleet);
  });

  it("is not sent for a deleted fleet, nor for rows whose owner's outbox delivered them (their notices are durable)", async () => {
    const { id: gone } = await createFleet();
    const { id: coordinated } = await createFleet();
    await sendAuditEvents(env, Date.now());
    const db = getDb(env.DB);
    // A fleet patched, then deleted, in one tick's rows; a coordinator's row (an event id: outbox-delivered).
    await db.batch([
      auditInsert(db, { actor: "token:test", action: "fleet.patch", target: `fleet:${gone}` }),
      auditInsert(db, { actor: "token:test", action: "fleet.delete", target: `fleet:${gone}` }),
      auditInsertOnce(
        db,
        auditEvent({ actor: "token:test", action: "reboot_group.put", target: `fleet:${coordinated}` }),
      ),
    ]);
    await sleep(THROTTLE_MS + 50);
    const tick = feedsHeard();
    const sent = await sendAuditEvents(tick.env, Date.now());
    expect(sent.rows).toBe(3);
    await sent.notices;
    expect(tick.heard).toEqual([]);
  });

  it("does not hold the cron's cursor while a notice waits on the feed", async () => {
    const { id: fleet } = await createFleet();
    await sendAuditEvents(env, Date.now());
    await updateFleet(feedsHeard(true).env, { waitUntil: () => {} }, "token:test", fleet, { stale_after_s: 77 });
    await sleep(THROTTLE_MS + 50);
    // The feed never answers: the tick still ends and its cursor moves past the row.
    const hung = feedsHeard(true);
    const sent = await Promise.race([sendAuditEvents(hung.env, Date.now()), sleep(3_000).then(() => null)]);
    expect(sent).not.toBeNull();
    expect(sent!.rows).toBe(1);
    const again = await sendAuditEvents(env, Date.now());
    expect(again.rows).toBe(0);
  });
});
