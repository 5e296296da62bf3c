import { describe, expect, it } from "vitest";
import { curl, fleetWithKey, getGroup, putGroup, raw, registerClients, zincati } from "./fleetlock-helpers";

describe("FleetLock protocol, as Zincati and curl speak it", () => {
  it("grants pre-reboot to a Zincati-shaped request (no Content-Type, pretty body, trailing-slash base_url)", async () => {
    const f = await fleetWithKey();
    expect(f.baseUrl).toMatch(new RegExp(`^https://hm\\.test/fleetlock/${f.fleet}/[A-Za-z0-9_-]{43}/$`));
    await putGroup(f.fleet, "default", { slots: 1 });
    const [c] = await registerClients(f.fleet, 1);
    const res = await zincati(f.baseUrl, "pre-reboot", c.id);
    expect(res.status).toBe(200);
    const g = await getGroup(f.fleet, "default");
    expect(g.holders.map((h) => h.id)).toEqual([c.id]);
    expect(g.holders[0].server).toEqual({ id: c.serverId, hostname: c.hostname });
    expect(Date.parse(g.holders[0].granted_at)).toBeGreaterThan(0);
  });

  it("accepts curl-shaped requests (form Content-Type, compact body) and releases on steady-state", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1 });
    const [c] = await registerClients(f.fleet, 1);
    expect((await curl(f.baseUrl, "pre-reboot", c.id)).status).toBe(200);
    const res = await curl(f.baseUrl, "steady-state", c.id);
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ released: true });
    expect((await getGroup(f.fleet, "default")).holders).toEqual([]);
  });
});
