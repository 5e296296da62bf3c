import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { call, createFleet, registerServer, report } from "./helpers";

const A1 = { name: "a", image: "a:1", version: "1" };
const B1 = { name: "b", image: "b:1", version: "1" };

async function server(fleet: string, desired: (typeof A1)[], rep?: ReturnType<typeof report>) {
  const s = await registerServer(fleet);
  await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents: desired } });
  if (rep) expect((await call("PUT", "/v1/agent/inventory", { token: s.token, body: rep })).status).toBe(200);
  return s;
}

describe("GET /v1/check/server-agents", () => {
  it("reports every reason with its fix, lists skipped servers with why, and pages by server", async () => {
    const f = await createFleet();
    const missing = await server(f.id, [A1, B1], report(2, [A1, { name: "c", image: "c:1" }]));
    const mismatch = await server(f.id, [A1], report(2, [{ name: "a", image: "a:2" }]));
    const failed = await server(
      f.id,
      [A1, B1],
      report(2, [A1, B1, { name: "c", image: "c:1" }], {
        errors: [
          { agent: "b", op: "update", message: "boom" },
          { agent: "c", op: "remove", message: "busy" },
        ],
      }),
    );
    const behind = await server(f.id, [A1], report(1, []));
    const stale = await server(f.id, [A1], report(2, [A1]));
    await env.DB.prepare("UPDATE servers SET status = 'stale' WHERE id = ?").bind(stale.id).run();
    const silent = await server(f.id, [A1]);
    const fine = await server(f.id, [A1], report(2, [A1]));

    const res = await call("GET", `/v1/check/server-agents?fleet=${f.id}`);
    expect(res.status).toBe(200);
    const rows = res.json.findings.map((x: any) => [x.server, x.agent, x.reason, x.fix]);
    const expected = [
      [missing.id, "b", "missing", "reissue"],
      [missing.id, "c", "removal_pending", "refresh"],
      [mismatch.id, "a", "image_mismatch", "reissue"],
      [failed.id, "b", "failed", "reissue"],
      [failed.id, "c", "removal_failed", "reissue"],
      [behind.id, null, "generation_behind", "refresh"],
      [stale.id, null, "stale_report", "none"],
    ];
    expect(rows.sort()).toEqual(expected.sort());
    const img = res.json.findings.find((x: any) => x.reason === "image_mismatch");
    expect(img).toMatchObject({ desired_image: "a:1", reported_image: "a:2", hostname: expect.any(String) });
    expect(img.instance).toMatch(/^[0-9a-f-]{36}$/);
    expect(res.json.skipped.map((s: any) => s.server).sort()).toEqual([stale.id, silent.id].sort());
    expect(res.json.skipped.find((s: any) => s.server === stale.id).why).toMatch(/^stale/);
    expect(JSON.stringify(res.json)).not.toContain(fine.id);

    // Filters, and paging visits each server once.
    const onlyB = await call("GET", `/v1/check/server-agents?fleet=${f.id}&agent=b`);
    expect(onlyB.json.findings.map((x: any) => x.reason).sort()).toEqual(["failed", "missing"]);
    const one = await call("GET", `/v1/check/server-agents?server=${mismatch.id}`);
    expect(one.json.findings.map((x: any) => x.reason)).toEqual(["image_mismatch"]);
    const seen: any[] = [];
    let cursor: string | null = null;
    do {
      const p: any = await call(
        "GET",
        `/v1/check/server-agents?fleet=${f.id}&limit=2${cursor ? `&cursor=${cursor}` : ""}`,
      );
      seen.push(...p.json.findings);
      cursor = p.json.next_cursor;
    } while (cursor);
    expect(seen.map((x) => [x.server, x.agent, x.reason, x.fix]).sort()).toEqual(expected.sort());
  });

  it("refuses bad filters", async () => {
    expect((await call("GET", "/v1/check/server-agents?server=-nope-")).json.error.code).toBe("invalid_query");
    // A well-formed hostname that names no server is not an empty check.
    expect((await call("GET", "/v1/check/server-agents?server=nope")).json.error.code).toBe("not_found");
    expect((await call("GET", "/v1/check/server-agents?cursor=zzz")).json.error.code).toBe("invalid_cursor");
    expect((await call("GET", "/v1/check/server-agents", { token: null })).status).toBe(401);
  });
});
