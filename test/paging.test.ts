import { describe, expect, it } from "vitest";
import { call, createFleet, registerServer, report } from "./helpers";

async function walk(path: string, limit: number) {
  const seen: any[] = [];
  let cursor: string | null = null;
  let pages = 0;
  do {
    const sep = path.includes("?") ? "&" : "?";
    const res = await call(
      "GET",
      `${path}${sep}limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`,
    );
    expect(res.status).toBe(200);
    expect(res.json.items.length).toBeLessThanOrEqual(limit);
    seen.push(...res.json.items);
    cursor = res.json.next_cursor;
    pages++;
  } while (cursor);
  return { seen, pages };
}

describe("cursor paging", () => {
  it("visits every server and every instance exactly once, under filters too", async () => {
    const fleet = await createFleet();
    const ids: string[] = [];
    for (let i = 0; i < 13; i++) {
      const s = await registerServer(fleet.id);
      ids.push(s.id);
      const agents = [
        { name: "compute", image: `compute:${i % 2}`, version: `${i % 2}` },
        { name: "logs", image: "logs:1", version: "1" },
      ];
      await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents } });
      if (i % 3 === 0) await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(2, agents) });
    }

    const servers = await walk(`/v1/servers?fleet=${fleet.id}`, 4);
    expect(servers.pages).toBe(4);
    expect(servers.seen.map((s) => s.id).sort()).toEqual([...ids].sort());
    expect(new Set(servers.seen.map((s) => s.id)).size).toBe(13);

    const realized = await walk(`/v1/servers?fleet=${fleet.id}&status=realized`, 2);
    expect(realized.seen).toHaveLength(5);

    const instances = await walk(`/v1/instances?agent=compute`, 3);
    const mine = instances.seen.filter((x) => ids.includes(x.server_id));
    expect(mine).toHaveLength(13);
    expect(new Set(instances.seen.map((x) => `${x.server_id}/${x.agent}`)).size).toBe(instances.seen.length);

    const all = await walk(`/v1/instances`, 5);
    const keys = all.seen.map((x) => `${x.server_id}/${x.agent}`);
    expect(new Set(keys).size).toBe(keys.length);
    expect(all.seen.filter((x) => ids.includes(x.server_id))).toHaveLength(26);

    const byImage = await walk(`/v1/instances?image=compute:1`, 2);
    expect(byImage.seen.filter((x) => ids.includes(x.server_id))).toHaveLength(6);
  });
});
