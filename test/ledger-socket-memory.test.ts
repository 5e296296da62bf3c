import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import type { ServerLedger } from "../src/ledger/durable-object";
import { openChannel } from "./channel-helpers";
import { call, report, reportingServer } from "./helpers";

// Every store write wakes the ledger's waiters and pushes to its host. A ledger with no socket at
// all remembers that (in memory), so a heartbeat to it lists no socket; the moment one is accepted
// it lists again, or a host would miss the change it is connected for.

const agents = [{ name: "compute", image: "compute:1", version: "1" }];

/** Lets the write's wake-up (a microtask) run. */
const afterTurn = () => new Promise((r) => setTimeout(r, 0));

describe("the ledger's memory of having no socket", () => {
  it("lists no socket for a heartbeat once a listing found none, and pushes to a host that connects later", async () => {
    const { s, stub } = await reportingServer(agents);
    const hash = (await stub.tokenHash())!;
    const text = JSON.stringify(report(2, agents));
    await runInDurableObject(stub, async (instance: ServerLedger, state) => {
      await instance.agentReport(hash, text);
      await afterTurn();
      const listed = vi.spyOn(state, "getWebSockets");
      try {
        for (let i = 0; i < 3; i++) {
          await instance.agentReport(hash, text);
          await afterTurn();
        }
        expect(listed).not.toHaveBeenCalled();
      } finally {
        listed.mockRestore();
      }
    });
    // The same instance, now with a host on the channel: an operator's write reaches it.
    const ch = await openChannel(s.token, { generation: 2 });
    try {
      const put = await call("PUT", `/v1/servers/${s.id}/desired`, {
        body: { generation: 3, agents: [{ ...agents[0], image: "compute:2" }] },
      });
      expect(put.status).toBe(200);
      expect(await ch.next("desired")).toMatchObject({ config: { generation: 3 } });
    } finally {
      ch.close();
    }
  });
});
