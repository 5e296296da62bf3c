/**
 * The console's servers list filtered by hostname: the typed prefix goes to the API, which reads
 * it from its hostname index, so a server is found wherever it sorts in a large fleet (matching
 * over a few pages read in the console would miss one that sorts past them).
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { consoleFetch, signIn } from "./console-helpers";
import { createFleet } from "./helpers";

describe("the console's servers list by hostname", () => {
  it("finds a server by hostname prefix past the first thousand of the fleet, and only those with the prefix", async () => {
    const fleet = await createFleet();
    const now = Date.now();
    // 1,200 servers: in hostname order, h999… comes after the first 1,000 (5 pages of 200).
    await env.DB.prepare(
      `INSERT INTO servers (id, fleet_id, hostname, kind, roles, reboot_group, state, status, desired_generation, created_at, updated_at)
       WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1200)
       SELECT printf('00000000-0000-4000-c000-%012d', i), ?1, 'h' || i || '.example.com', 'managed', '[]', 'default', 'active', 'realized', 1, ?2, ?2 FROM n`,
    )
      .bind(fleet.id, now)
      .run();
    const { cookie } = await signIn();
    const res = await consoleFetch(`/console/servers?fleet=${fleet.id}&hostname=h999`, { cookie });
    expect(res.status).toBe(200);
    const html = await res.text();
    const listed = [...html.matchAll(/>(h\d+\.example\.com)</g)].map((m) => m[1]);
    expect(listed).toEqual(["h999.example.com"]);
  });
});
