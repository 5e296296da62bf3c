import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { runUpgrades } from "../src/upgrades/runner";
import { NEWEST_VERSION } from "../src/upgrades/steps";
import { fleetWithKey, getGroup, putGroup, registerClients, zincati } from "./fleetlock-helpers";
import { dataVersion, resetUpgrades } from "./upgrades-helpers";

/** An index row for a server whose identity push, under the previous release, never arrived. */
async function serverTheCoordinatorMissed(fleet: string, fleetlockId: string, group = "default") {
  const id = crypto.randomUUID();
  await env.DB.prepare(
    `INSERT INTO servers (id, fleet_id, hostname, kind, roles, reboot_group, fleetlock_id, state, status,
                          desired_generation, created_at, updated_at)
     VALUES (?, ?, ?, 'managed', '[]', ?, ?, 'active', 'unknown', 1, 1000, 1000)`,
  )
    .bind(id, fleet, `${fleetlockId}.example.com`, group, fleetlockId)
    .run();
  return id;
}

describe("upgrade step 2: FleetLock identities", () => {
  it("hands the coordinator every registered id it missed, and never overrides one a ledger delivered", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 2 });
    const missed = await serverTheCoordinatorMissed(f.fleet, "missed-1");
    const [known] = await registerClients(f.fleet, 1);
    // A stale index row claiming the id a ledger already delivered for another server.
    await serverTheCoordinatorMissed(f.fleet, known.id);
    expect((await zincati(f.baseUrl, "pre-reboot", "missed-1")).json.kind).toBe("unknown_client");

    await resetUpgrades(1);
    expect(await runUpgrades(env, { trigger: "cron" })).toMatchObject({ outcome: "applied", applied: [2, 3] });
    expect(await dataVersion()).toBe(NEWEST_VERSION);

    expect((await zincati(f.baseUrl, "pre-reboot", "missed-1")).status).toBe(200);
    expect((await zincati(f.baseUrl, "pre-reboot", known.id)).status).toBe(200);
    const holders = (await getGroup(f.fleet, "default")).holders;
    expect(Object.fromEntries(holders.map((h) => [h.id, h.server!.id]))).toEqual({
      "missed-1": missed,
      [known.id]: known.serverId,
    });
  });
});
