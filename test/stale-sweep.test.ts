/**
 * The cron's server.stale sweep (src/webhooks/stale.ts) under load: more deadlines than a tick's
 * page, written late in a burst, or owed to a coordinator that cannot take them. The index rows
 * are written straight into D1 (hundreds of registrations would only slow the test down), and the
 * coordinators' `fleetEvents` is recorded (or refused) on the way.
 */
import { env } from "cloudflare:test";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { FleetEvent } from "../src/webhooks/events";
import { RECENT_WRITE_MS, sendStaleEvents, STALE_CURSOR, STALE_PER_TICK } from "../src/webhooks/stale";
import { runFleetTasks } from "../src/fleets/tasks";
import { createFleet, fireTimersNow, uniq } from "./helpers";
import { hook, receivedBy, receiver } from "./webhook-helpers";
import { coordinator } from "./support/objects";

/** `env` whose coordinators record the events they take, and refuse them for the fleets in `down`. */
function recording(down = new Set<string>()) {
  const taken: FleetEvent[] = [];
  const coordinators = new Proxy(env.REBOOT, {
    get(target, prop) {
      const own = Reflect.get(target, prop);
      if (prop !== "get") return typeof own === "function" ? own.bind(target) : own;
      return (id: DurableObjectId) =>
        new Proxy(target.get(id), {
          get: (stub, p) =>
            p === "fleetEvents"
              ? async (events: FleetEvent[]) => {
                  if (down.has(events[0].fleet)) throw new Error("simulated: coordinator unreachable");
                  taken.push(...events);
                }
              : Reflect.get(stub, p),
        });
    },
  });
  return { env: { ...env, REBOOT: coordinators } as typeof env, taken };
}

/** `n` server rows of `fleet`, the i-th with stale_at `staleAt(i)`, written at `updatedAt(i)`. */
async function staleRows(
  fleet: string,
  n: number,
  staleAt: (i: number) => number,
  updatedAt: (i: number) => number,
  tag = "s",
) {
  const stmt = env.DB.prepare(
    `INSERT INTO servers (id, fleet_id, hostname, kind, roles, reboot_group, state, status, desired_generation, last_seen, stale_at, created_at, updated_at)
     VALUES (?, ?, ?, 'managed', '[]', 'default', 'active', 'realized', 1, ?, ?, ?, ?)`,
  );
  const ids = Array.from({ length: n }, (_, i) => `${fleet}-${tag}${i}`);
  await env.DB.batch(
    ids.map((id, i) =>
      stmt.bind(id, fleet, `${id}.sweep.example`, staleAt(i) - 300_000, staleAt(i), updatedAt(i), updatedAt(i)),
    ),
  );
  return ids;
}

const setCursor = (at: number) =>
  env.DB.prepare("INSERT INTO cron_cursors (name, at) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET at = excluded.at")
    .bind(STALE_CURSOR, at)
    .run();

const serversOf = (events: FleetEvent[], fleet: string) =>
  new Set(events.filter((e) => e.fleet === fleet).map((e) => e.data.server_id));

describe("the server.stale sweep under load", () => {
  // The sweep reads every fleet's rows: each test's own are removed after it.
  beforeEach(() => env.DB.prepare("DELETE FROM cron_cursors").run());
  afterEach(() => env.DB.prepare("UPDATE servers SET state = 'removed' WHERE hostname LIKE '%.sweep.example'").run());

  it("sends every deadline of a burst written late, more than a page of them, after the burst left the recent-write window", async () => {
    const fleet = uniq("sweep-late");
    const now = Date.now();
    // The sweep passed these deadlines before their rows were written (a ledger's quiet watch
    // writes the exact stale_at minutes late): a network cut silenced more hosts than one page.
    await setCursor(now);
    const ids = await staleRows(
      fleet,
      STALE_PER_TICK + 100,
      (i) => now - 4 * 60_000 + i,
      (i) => now - 30_000 + i * 10,
    );
    const { env: e, taken } = recording();
    await sendStaleEvents(e, now);
    expect(serversOf(taken, fleet).size).toBe(STALE_PER_TICK);
    // The next ticks come after the burst's writes are older than the recent-write window.
    await sendStaleEvents(e, now + RECENT_WRITE_MS + 60_000);
    await sendStaleEvents(e, now + RECENT_WRITE_MS + 120_000);
    expect(serversOf(taken, fleet)).toEqual(new Set(ids));
  });

  it("moves on past a coordinator that cannot take its events, which are owed to it as a fleet task and delivered once it can", async () => {
    const { id: down } = await createFleet();
    const wants = await hook(down, "stale", ["server.stale"]);
    const sent = await receiver(down);
    const busy = uniq("sweep-busy");
    const now = Date.now();
    await setCursor(now - 5 * 60_000);
    // More deadlines than a page: the unreachable fleet's first sorts before all of the other's.
    const first = now - 4 * 60_000;
    const written = () => now - 60_000;
    const busyIds = await staleRows(busy, STALE_PER_TICK + 100, (i) => first + 1 + i, written);
    // One before the page, one after it: the fleet is owed events from two ticks.
    const downIds = [
      ...(await staleRows(down, 1, () => first, written)),
      ...(await staleRows(down, 1, () => first + 550, written, "later")),
    ];

    const { env: e, taken } = recording(new Set([down]));
    for (let tick = 0; tick < 3; tick++) await sendStaleEvents(e, now + tick * 60_000);
    // The other fleet got every one of its deadlines while this one could not take any.
    expect(serversOf(taken, busy)).toEqual(new Set(busyIds));
    expect(serversOf(taken, down).size).toBe(0);
    const task = await env.DB.prepare("SELECT payload FROM fleet_tasks WHERE fleet_id = ? AND kind = 'stale_events'")
      .bind(down)
      .first<{ payload: string }>();
    expect(new Set((JSON.parse(task!.payload) as FleetEvent[]).map((ev) => ev.data.server_id))).toEqual(
      new Set(downIds),
    );

    // The coordinator is back: the cron's fleet tasks hand it what it is owed, once.
    await runFleetTasks(env);
    await fireTimersNow(coordinator(down));
    expect(receivedBy(sent, wants)).toEqual(["server.stale", "server.stale"]);
    expect(await env.DB.prepare("SELECT COUNT(*) AS n FROM fleet_tasks WHERE fleet_id = ?").bind(down).first("n")).toBe(
      0,
    );
  });
});
