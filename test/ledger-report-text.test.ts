import { describe, expect, it } from "vitest";
import { call, report, reportingServer } from "./helpers";

// The ledger's agentReport takes the report as JSON text. The Worker validated it, but the object
// answers whatever reaches it (a caller of another version mid-deploy, a bug): a refusal with a
// code, never a throw (a 500 at the edge) nor a report of the wrong shape stored.

const agents = [{ name: "compute", image: "compute:1", version: "1" }];

/** A server with a stored report, its ledger, and its token's digest (what agentReport is called with). */
async function reportingLedger() {
  const { s, stub } = await reportingServer(agents);
  return { s, stub, hash: (await stub.tokenHash())! };
}

describe("the ledger's report taken as JSON text", () => {
  it("refuses text that is not JSON with malformed_json, and keeps the report it holds", async () => {
    const { s, stub, hash } = await reportingLedger();
    const before = (await call("GET", `/v1/servers/${s.id}`)).json;
    expect(await stub.agentReport(hash, "{not json")).toMatchObject({ ok: false, code: "malformed_json" });
    expect((await call("GET", `/v1/servers/${s.id}`)).json).toEqual(before);
  });

  it("refuses JSON that is not an InventoryReport with validation_failed naming the field, storing nothing", async () => {
    const { s, stub, hash } = await reportingLedger();
    const before = (await call("GET", `/v1/servers/${s.id}`)).json;
    const bad = { ...report(2, agents), agents: [{ name: "compute" }] };
    const answer = await stub.agentReport(hash, JSON.stringify(bad));
    expect(answer).toMatchObject({ ok: false, code: "validation_failed" });
    expect(JSON.stringify((answer as { details?: unknown }).details)).toContain("agents.0.image");
    expect(await stub.agentReport(hash, JSON.stringify({}))).toMatchObject({ ok: false, code: "validation_failed" });
    expect((await call("GET", `/v1/servers/${s.id}`)).json).toEqual(before);
  });

  it("refuses a report that is not text (an older caller's object) rather than parse it", async () => {
    const { stub, hash } = await reportingLedger();
    const answer = await stub.agentReport(hash, report(2, agents) as unknown as string);
    expect(answer).toMatchObject({ ok: false, code: "validation_failed" });
  });

  it("checks the token before the text: a wrong token is unauthorized whatever it sends", async () => {
    const { stub } = await reportingLedger();
    expect(await stub.agentReport("0".repeat(64), "{not json")).toMatchObject({ ok: false, code: "unauthorized" });
  });

  it("still answers a valid report with the ReportAccepted text", async () => {
    const { s, stub, hash } = await reportingLedger();
    const answer = await stub.agentReport(hash, JSON.stringify(report(2, agents)));
    expect(answer.ok).toBe(true);
    expect(JSON.parse((answer as { accepted: string }).accepted)).toMatchObject({
      server_id: s.id,
      desired_generation: 2,
      status: "realized",
    });
  });

  it("takes the last report's text again as that report, and any other text as what it says", async () => {
    const { s, stub, hash } = await reportingLedger();
    const same = JSON.stringify(report(2, agents));
    for (let i = 0; i < 2; i++) {
      const answer = await stub.agentReport(hash, same);
      expect(JSON.parse((answer as { accepted: string }).accepted)).toMatchObject({ status: "realized" });
    }
    const other = await stub.agentReport(hash, JSON.stringify(report(2, [{ ...agents[0], image: "compute:2" }])));
    expect(JSON.parse((other as { accepted: string }).accepted)).toMatchObject({ server_id: s.id, status: "drifted" });
    expect(await stub.agentReport(hash, JSON.stringify({ ...report(2, agents), generation: -1 }))).toMatchObject({
      ok: false,
      code: "validation_failed",
    });
  });
});
