/**
 * Strings that are not text: a lone UTF-16 surrogate (legal JSON, `"\ud800"`, but no character) and
 * control characters. The objects keep a JSON string as sent while D1 stores UTF-8, where a lone
 * surrogate becomes U+FFFD: accepted, the owner and the index would disagree about the same value.
 */
import { describe, expect, it } from "vitest";
import { call, createFleet, registerServer, report } from "./helpers";
import { openChannel } from "./channel-helpers";

const LONE = "\ud800";

async function serverViews(id: string, fleet: string) {
  const own = await call("GET", `/v1/servers/${id}`);
  const listed = await call("GET", `/v1/servers?fleet=${fleet}`);
  return { own: own.json, listed: listed.json.items.find((s: { id: string }) => s.id === id) };
}

describe("strings that are not text", () => {
  it("refuses a lone surrogate or a control character in a fleetlock_id, changing neither the ledger nor the index", async () => {
    const fleet = (await createFleet()).id;
    const s = await registerServer(fleet, { fleetlock_id: "node-1" });
    const before = await serverViews(s.id, fleet);
    for (const id of [`node-${LONE}`, "node\u0000x", "node\u001b[31m", "\ud83d"]) {
      const res = await call("PATCH", `/v1/servers/${s.id}`, { body: { fleetlock_id: id } });
      expect(res.status, JSON.stringify(id)).toBe(400);
      expect(res.json.error.code).toBe("validation_failed");
      const reg = await call("POST", "/v1/servers", {
        body: { fleet, hostname: "other.example.com", fleetlock_id: id },
      });
      expect(reg.status, JSON.stringify(id)).toBe(400);
    }
    expect(await serverViews(s.id, fleet)).toEqual(before);
    // A pair of surrogates is one character, and is taken.
    const pair = await call("PATCH", `/v1/servers/${s.id}`, { body: { fleetlock_id: "node-\ud83d\ude00" } });
    expect(pair.status).toBe(200);
    const after = await serverViews(s.id, fleet);
    expect(after.own.fleetlock_id).toBe("node-\ud83d\ude00");
    expect(after.listed.fleetlock_id).toBe("node-\ud83d\ude00");
  });

  it("refuses a lone surrogate anywhere in a JSON body, naming where", async () => {
    const fleet = (await createFleet()).id;
    const token = await call("POST", "/v1/tokens", {
      body: { name: "ci", scope: "read", description: `for ${LONE} the build` },
    });
    expect(token.status).toBe(400);
    expect(token.json.error.code).toBe("validation_failed");
    expect(token.json.error.details).toEqual([{ path: "description", message: expect.any(String) }]);
    const hold = await call("PUT", `/v1/fleets/${fleet}/hold`, { body: { reason: `change ${LONE}` } });
    expect(hold.status).toBe(400);
    expect(hold.json.error.details).toEqual([{ path: "reason", message: expect.any(String) }]);
    expect((await call("GET", `/v1/fleets/${fleet}/gates`)).json.hold).toBeNull();
  });

  it("refuses a host's report with a lone surrogate, over HTTP and over the channel, storing nothing", async () => {
    const fleet = (await createFleet()).id;
    const s = await registerServer(fleet);
    const bad = report(1, [{ name: "web", image: `web:1${LONE}` }]);
    const http = await call("PUT", "/v1/agent/inventory", { token: s.token, body: bad });
    expect(http.status).toBe(400);
    expect(http.json.error.code).toBe("validation_failed");

    const ch = await openChannel(s.token, { generation: 1 });
    ch.send({ type: "report", v: 1, id: "r1", report: bad });
    const ack = await ch.next("ack");
    expect(ack).toMatchObject({ id: "r1", status: 400, error: { code: "validation_failed" } });
    ch.close();
    const view = (await call("GET", `/v1/servers/${s.id}`)).json;
    expect(view.report).toBeNull();
    expect(view.agents).toEqual([]);
  });
});
