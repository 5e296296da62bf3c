/**
 * GET /v1/servers pages in natural hostname order (sim-2 before sim-10) across pages, from the
 * index's hostname_sort key, which the ledger's projection writes and upgrade step 3 backfills.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { hostnameSortKey } from "../src/model/server/hostname-order";
import { runUpgrades } from "../src/upgrades/runner";
import { NEWEST_VERSION } from "../src/upgrades/steps";
import { call, createFleet, registerServer } from "./helpers";
import { dataVersion, resetUpgrades } from "./upgrades-helpers";

const byKey = (names: string[]) =>
  [...names].sort((a, b) =>
    hostnameSortKey(a) < hostnameSortKey(b) ? -1 : hostnameSortKey(a) > hostnameSortKey(b) ? 1 : 0,
  );

/** Every page of the fleet's servers, `limit` at a time, following next_cursor. */
async function allPages(query: string, limit: number) {
  const names: string[] = [];
  let cursor: string | null = null;
  let pages = 0;
  do {
    const res = await call("GET", `/v1/servers?${query}&limit=${limit}${cursor ? `&cursor=${cursor}` : ""}`);
    expect(res.status).toBe(200);
    names.push(...res.json.items.map((s: { hostname: string }) => s.hostname));
    cursor = res.json.next_cursor;
    pages++;
  } while (cursor && pages < 50);
  return names;
}

describe("natural hostname order", () => {
  it("orders digit runs as numbers, keeping text order around them", () => {
    expect(
      byKey([
        "sim-10",
        "sim-2",
        "sim-1",
        "sim-1a",
        "sim-01b",
        "db-100",
        "db-20",
        "web",
        "web-9.x",
        "web-10.a",
        "a10",
        "a-1",
        "a.1",
      ]),
    ).toEqual([
      "a-1",
      "a.1",
      "a10",
      "db-20",
      "db-100",
      "sim-1",
      "sim-1a",
      "sim-01b",
      "sim-2",
      "sim-10",
      "web",
      "web-9.x",
      "web-10.a",
    ]);
    expect(hostnameSortKey("node-0007")).toBe(hostnameSortKey("node-7"));
    expect(byKey(["n99999999999", "n100000000000", "n9"])).toEqual(["n9", "n99999999999", "n100000000000"]);
  });

  it("pages a fleet's servers sim-2 before sim-10, across pages and with a status", async () => {
    const { id: fleet } = await createFleet();
    const want = Array.from({ length: 12 }, (_, i) => `sim-${i + 1}.example.com`);
    for (const hostname of [...want].reverse()) await registerServer(fleet, { hostname });
    expect(await allPages(`fleet=${fleet}`, 5)).toEqual(want);
    expect(await allPages(`fleet=${fleet}&status=unknown`, 4)).toEqual(want);
    expect(await allPages(`fleet=${fleet}&hostname=sim-1*`, 2)).toEqual(want.filter((h) => h.startsWith("sim-1")));
  });

  it("refuses a cursor of the text-ordered pages as one this API did not issue", async () => {
    const old = btoa(JSON.stringify(["sim-10.example.com", crypto.randomUUID()]));
    const res = await call("GET", `/v1/servers?cursor=${encodeURIComponent(old)}`);
    expect(res.status).toBe(400);
  });

  it("upgrade step 3 gives rows indexed before the key existed their key, and then they page naturally", async () => {
    const { id: fleet } = await createFleet();
    const made: string[] = [];
    for (const n of [10, 2, 1]) made.push((await registerServer(fleet, { hostname: `old-${n}.example.com` })).id);
    // As the previous release left them: no key.
    await env.DB.prepare("UPDATE servers SET hostname_sort = '' WHERE fleet_id = ?").bind(fleet).run();
    expect(await allPages(`fleet=${fleet}`, 2)).toEqual([
      "old-1.example.com",
      "old-10.example.com",
      "old-2.example.com",
    ]);

    await resetUpgrades(2);
    expect(await runUpgrades(env, { trigger: "cron" })).toMatchObject({ outcome: "applied", applied: [3] });
    expect(await dataVersion()).toBe(NEWEST_VERSION);
    const keys = await env.DB.prepare("SELECT hostname, hostname_sort FROM servers WHERE fleet_id = ?")
      .bind(fleet)
      .all<{ hostname: string; hostname_sort: string }>();
    for (const r of keys.results) expect(r.hostname_sort).toBe(hostnameSortKey(r.hostname));
    expect(await allPages(`fleet=${fleet}`, 2)).toEqual([
      "old-1.example.com",
      "old-2.example.com",
      "old-10.example.com",
    ]);
  });
});
