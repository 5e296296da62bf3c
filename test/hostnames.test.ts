/**
 * Servers named by hostname (docs/operator-guide.md): every route that takes a server takes its hostname (or
 * fleet/hostname, or ?fleet=); a hostname is unique among a fleet's live servers; one that names
 * servers in several fleets is 409 ambiguous_server listing them; lists sort by hostname and
 * filter by exact hostname or prefix; instances and the audit log name servers by hostname.
 */
import { describe, expect, it } from "vitest";
import { call, createFleet, registerServer, report, uniq } from "./helpers";

const A = { name: "a", image: "a:1", version: "1" };

describe("a server named by hostname", () => {
  it("is found by every server route, any case, as fleet/hostname too", async () => {
    const { id: fleet } = await createFleet();
    const name = `${uniq("web")}.example.com`;
    const s = await registerServer(fleet, { hostname: name });
    const got = await call("GET", `/v1/servers/${name.toUpperCase()}`);
    expect(got.status).toBe(200);
    expect(got.json.id).toBe(s.id);
    expect((await call("GET", `/v1/servers/${fleet}%2F${name}`)).json.id).toBe(s.id);
    expect((await call("GET", `/v1/servers/${name}?fleet=${fleet}`)).json.id).toBe(s.id);
    const put = await call("PUT", `/v1/servers/${name}/desired`, { body: { generation: 2, agents: [A] } });
    expect(put.json.generation).toBe(2);
    expect((await call("GET", `/v1/servers/${name}/desired`)).json.generation).toBe(2);
    expect((await call("PATCH", `/v1/servers/${name}`, { body: { reboot_group: "rack-1" } })).json.reboot_group).toBe(
      "rack-1",
    );
    expect((await call("POST", `/v1/servers/${name}/desired/release`)).json.planning.mode).toBe("planned");
    expect((await call("POST", `/v1/servers/${name}/refresh`)).json.refresh).not.toBeNull();
    const rotated = await call("POST", `/v1/servers/${name}/token`);
    expect(rotated.json.id).toBe(s.id);
    expect((await call("POST", `/v1/servers/${name}/decommission`)).json.state).toBe("decommissioning");
    expect((await call("POST", `/v1/servers/${name}/decommission/cancel`)).json.state).not.toBe("decommissioning");
  });

  it("that names no server is 404 saying so", async () => {
    const res = await call("GET", "/v1/servers/nobody-here.example.com");
    expect(res.status).toBe(404);
    expect(res.json.error.message).toMatch(/no server is named 'nobody-here\.example\.com'/);
  });

  it("in two fleets is 409 ambiguous_server listing both; ?fleet= or fleet/hostname picks one", async () => {
    const { id: f1 } = await createFleet();
    const { id: f2 } = await createFleet();
    const name = `${uniq("twin")}.example.com`;
    const a = await registerServer(f1, { hostname: name });
    const b = await registerServer(f2, { hostname: name });
    const res = await call("GET", `/v1/servers/${name}`);
    expect(res.status).toBe(409);
    expect(res.json.error.code).toBe("ambiguous_server");
    expect(res.json.error.details.candidates.map((c: any) => c.id).sort()).toEqual([a.id, b.id].sort());
    expect(res.json.error.message).toMatch(/\?fleet=/);
    expect((await call("GET", `/v1/servers/${name}?fleet=${f2}`)).json.id).toBe(b.id);
    expect((await call("GET", `/v1/servers/${f1}%2F${name}`)).json.id).toBe(a.id);
    expect((await call("GET", `/v1/servers/${f1}%2F${name}?fleet=${f2}`)).json.error.code).toBe("invalid_query");
  });

  it("is unique among a fleet's live servers: a second registration is 409 hostname_taken; once removed, the name is free", async () => {
    const { id: fleet } = await createFleet();
    const name = `${uniq("once")}.example.com`;
    const first = await registerServer(fleet, { hostname: name });
    const dup = await call("POST", "/v1/servers", { body: { fleet, hostname: name.toUpperCase(), kind: "managed" } });
    expect(dup.status).toBe(409);
    expect(dup.json.error.code).toBe("hostname_taken");
    expect(dup.json.error.details.server_id).toBe(first.id);
    await call("POST", `/v1/servers/${first.id}/decommission`, { body: { force: true, reason: "gone" } });
    const again = await call("POST", "/v1/servers", { body: { fleet, hostname: name, kind: "managed" } });
    expect(again.status).toBe(201);
    // The live one is the one the name finds; the audit log still finds the removed one by id.
    expect((await call("GET", `/v1/servers/${name}`)).json.id).toBe(again.json.id);
  });
});

describe("lists by hostname", () => {
  it("sort servers by hostname across pages, and filter by exact hostname or prefix", async () => {
    const { id: fleet } = await createFleet();
    const names = ["c-3", "a-1", "b-2", "a-10", "b-20"].map((n) => `${n}.example.com`);
    for (const hostname of names) await registerServer(fleet, { hostname });
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page: any = await call("GET", `/v1/servers?fleet=${fleet}&limit=2${cursor ? `&cursor=${cursor}` : ""}`);
      seen.push(...page.json.items.map((s: any) => s.hostname));
      cursor = page.json.next_cursor;
    } while (cursor);
    expect(seen).toEqual([...names].sort());
    const exact = await call("GET", `/v1/servers?fleet=${fleet}&hostname=A-1.example.com`);
    expect(exact.json.items.map((s: any) => s.hostname)).toEqual(["a-1.example.com"]);
    const prefix = await call("GET", `/v1/servers?fleet=${fleet}&hostname=b-2*`);
    expect(prefix.json.items.map((s: any) => s.hostname)).toEqual(["b-2.example.com", "b-20.example.com"]);
    expect((await call("GET", `/v1/servers?hostname=a-1*x`)).json.error.code).toBe("invalid_query");
  });

  it("instances list in hostname order, and paging by cursor walks them all once", async () => {
    const { id: fleet } = await createFleet();
    const tag = uniq("ord");
    // Registered out of hostname order, so server-id order is not hostname order.
    const names = ["m", "c", "x", "a"].map((p) => `${p}-${tag}.example.com`);
    for (const name of names) {
      const s = await registerServer(fleet, { hostname: name });
      await call("PUT", `/v1/servers/${s.id}/desired`, {
        body: { generation: 2, agents: [A, { name: "b", image: "b:1", version: "1" }] },
      });
    }
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const res: any = await call("GET", `/v1/instances?agent=a&limit=1${cursor ? `&cursor=${cursor}` : ""}`);
      seen.push(...res.json.items.map((i: any) => i.hostname));
      cursor = res.json.next_cursor;
    } while (cursor);
    const ours = seen.filter((h) => h.endsWith(`-${tag}.example.com`));
    expect(ours).toEqual([...names].sort());
    expect(seen).toEqual([...seen].sort());
    const one = await call("GET", `/v1/instances?server=${names[0]}`);
    expect(one.json.items.map((i: any) => i.agent)).toEqual(["a", "b"]);
  });

  it("instances and the drift check take a hostname and name servers by it; the audit log too", async () => {
    const { id: fleet } = await createFleet();
    const name = `${uniq("inst")}.example.com`;
    const s = await registerServer(fleet, { hostname: name });
    await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents: [A] } });
    await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(2, [{ name: "a", image: "a:0" }]) });
    const inst = await call("GET", `/v1/instances?server=${name}`);
    expect(inst.json.items).toMatchObject([{ server_id: s.id, hostname: name, agent: "a" }]);
    const check = await call("GET", `/v1/check/server-agents?server=${name}`);
    expect(check.json.findings.map((f: any) => f.hostname)).toContain(name);
    const audit = await call("GET", `/v1/audit?target=server:${name}`);
    expect(audit.json.items.length).toBeGreaterThan(0);
    for (const e of audit.json.items) expect(e).toMatchObject({ target: `server:${s.id}`, hostname: name });
  });
});
