import { describe, expect, it } from "vitest";
import type { DesiredState } from "../src/model/server/record";
import type { StoredReport } from "../src/model/server/schemas";
import { computeStatus } from "../src/model/server/status";
import { call, createFleet, registerServer, report } from "./helpers";

const desired: DesiredState = {
  generation: 3,
  agents: [
    { name: "compute", image: "compute:2", version: "2", instance_id: "i-compute" },
    { name: "logs", image: "logs:1", version: "1", instance_id: "i-logs" },
  ],
  lifecycle: "run",
  updated_at: 0,
};

function stored(
  generation: number,
  agents: { name: string; image: string; state?: string }[],
  extra = {},
): StoredReport {
  return { ...(report(generation, agents, extra) as any), received_at: 1_000 };
}

const both = [
  { name: "compute", image: "compute:2" },
  { name: "logs", image: "logs:1" },
];

describe("computeStatus (pure status table)", () => {
  const at = (r: StoredReport | undefined, now = 1_000) => computeStatus(desired, r, now, 60_000);

  it("is unknown before any report", () => {
    expect(at(undefined).status).toBe("unknown");
  });

  it("is realized when the report is current, error-free and matches by name and image, all running", () => {
    const s = at(stored(3, both));
    expect(s.status).toBe("realized");
    expect(s.agents.map((a) => a.status)).toEqual(["realized", "realized"]);
  });

  it("is pending while the report's generation is behind", () => {
    const s = at(
      stored(2, [
        { name: "compute", image: "compute:1" },
        { name: "logs", image: "logs:1" },
      ]),
    );
    expect(s.status).toBe("pending");
    expect(s.agents.find((a) => a.name === "compute")!.status).toBe("pending");
    expect(s.agents.find((a) => a.name === "logs")!.status).toBe("realized");
  });

  it("is drifted, not realized, when the report runs the desired image at another version (a catalog image keeps its name across versions)", () => {
    const r = stored(3, both);
    r.agents[0] = { ...r.agents[0], version: "1" };
    const s = at(r);
    expect(s.status).toBe("drifted");
    expect(s.agents.find((a) => a.name === "compute")!.status).toBe("drifted");
  });

  it("is failed when the current generation carries errors, naming the failed agent", () => {
    const s = at(
      stored(
        3,
        [
          { name: "compute", image: "compute:1" },
          { name: "logs", image: "logs:1" },
        ],
        {
          errors: [{ agent: "compute", op: "update", message: "disk full" }],
        },
      ),
    );
    expect(s.status).toBe("failed");
    expect(s.agents.find((a) => a.name === "compute")).toMatchObject({
      status: "failed",
      errors: [{ op: "update", message: "disk full" }],
    });
  });

  it("is drifted when a host claims the new generation but still reports a removed agent", () => {
    const s = at(stored(3, [...both, { name: "old-agent", image: "old:1" }]));
    expect(s.status).toBe("drifted");
    expect(s.agents.find((a) => a.name === "old-agent")!.status).toBe("removal_pending");
  });

  it("marks an agent whose removal failed as removal_failed and the server failed", () => {
    const s = at(
      stored(3, [...both, { name: "old-agent", image: "old:1" }], {
        errors: [{ agent: "old-agent", op: "remove", message: "zone busy" }],
      }),
    );
    expect(s.status).toBe("failed");
    expect(s.agents.find((a) => a.name === "old-agent")).toMatchObject({ status: "removal_failed" });
  });

  it("is drifted when a desired agent is missing, on another image, or not running", () => {
    expect(at(stored(3, [both[0]])).status).toBe("drifted");
    expect(at(stored(3, [both[0], { name: "logs", image: "logs:0" }])).status).toBe("drifted");
    expect(at(stored(3, [both[0], { ...both[1], state: "stopped" }])).status).toBe("drifted");
  });

  it("is stale when no report arrived within stale-after", () => {
    expect(at(stored(3, both), 1_000 + 60_001).status).toBe("stale");
    expect(at(stored(3, both), 1_000 + 60_000).status).toBe("realized");
  });
});

describe("PUT /v1/agent/inventory", () => {
  async function setup() {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    await call("PUT", `/v1/servers/${s.id}/desired`, {
      body: { generation: 2, agents: [{ name: "compute", image: "compute:1", version: "1" }] },
    });
    await call("PUT", `/v1/servers/${s.id}/desired`, {
      body: { generation: 3, agents: [{ name: "compute", image: "compute:2", version: "2" }] },
    });
    return s;
  }

  it("never believes a removal the host still reports, and reports the host's removal error", async () => {
    const s = await setup();
    const claimed = await call("PUT", "/v1/agent/inventory", {
      token: s.token,
      body: report(3, [
        { name: "compute", image: "compute:2" },
        { name: "gone", image: "gone:1" },
      ]),
    });
    expect(claimed.status).toBe(200);
    expect(claimed.json.status).toBe("drifted");
    expect(claimed.json.agents.find((a: any) => a.name === "gone").status).toBe("removal_pending");

    const failed = await call("PUT", "/v1/agent/inventory", {
      token: s.token,
      body: report(
        3,
        [
          { name: "compute", image: "compute:2" },
          { name: "gone", image: "gone:1" },
        ],
        {
          errors: [{ agent: "gone", op: "remove", message: "device busy" }],
        },
      ),
    });
    expect(failed.json.status).toBe("failed");
    const view = await call("GET", `/v1/servers/${s.id}`);
    expect(view.json.agents.find((a: any) => a.name === "gone")).toMatchObject({
      status: "removal_failed",
      errors: [{ op: "remove", message: "device busy" }],
    });

    const done = await call("PUT", "/v1/agent/inventory", {
      token: s.token,
      body: report(3, [{ name: "compute", image: "compute:2" }]),
    });
    expect(done.json.status).toBe("realized");
    const instances = await call("GET", `/v1/instances?server=${s.id}`);
    expect(instances.json.items.map((i: any) => i.agent)).toEqual(["compute"]);
  });

  it("rejects a report claiming a generation that was never issued, and keeps the previous report", async () => {
    const s = await setup();
    await call("PUT", "/v1/agent/inventory", {
      token: s.token,
      body: report(2, [{ name: "compute", image: "compute:1" }]),
    });
    const res = await call("PUT", "/v1/agent/inventory", {
      token: s.token,
      body: report(4, [{ name: "compute", image: "compute:2" }]),
    });
    expect(res.status).toBe(409);
    expect(res.json.error.code).toBe("generation_not_issued");
    const view = await call("GET", `/v1/servers/${s.id}`);
    expect(view.json).toMatchObject({ status: "pending", reported_generation: 2 });
  });

  it("projects status and instances into the index for search", async () => {
    const s = await setup();
    await call("PUT", "/v1/agent/inventory", {
      token: s.token,
      body: report(3, [{ name: "compute", image: "compute:2" }]),
    });
    const list = await call(
      "GET",
      `/v1/servers?fleet=${(await call("GET", `/v1/servers/${s.id}`)).json.fleet}&status=realized`,
    );
    expect(list.json.items.map((x: any) => x.id)).toEqual([s.id]);
    expect(list.json.items[0]).toMatchObject({ state: "active", desired_generation: 3, reported_generation: 3 });
    const byImage = await call("GET", `/v1/instances?image=compute:2&server=${s.id}`);
    expect(byImage.json.items).toEqual([
      expect.objectContaining({ agent: "compute", status: "realized", desired: { image: "compute:2", version: "2" } }),
    ]);
  });
});
