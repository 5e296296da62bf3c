/// <reference types="vite/client" />
import { Validator, type Schema } from "@cfworker/json-schema";
import { describe, expect, it } from "vitest";
import { channelMessageDocument } from "../src/model/server/channel-messages";
import { call, createFleet, registerServer, report } from "./helpers";
import { openChannel } from "./channel-helpers";

/** The committed file as it is on disk, bundled into the test by Vite (workerd has no file system). */
const committed = JSON.parse(
  Object.values(
    import.meta.glob("../channel.schema.json", { query: "?raw", import: "default", eager: true }),
  )[0] as string,
);

const validator = (def: "HostMessage" | "ServerMessage") =>
  new Validator({ ...(committed as object), $ref: `#/$defs/${def}` } as Schema, "2020-12", false);

describe("the host channel's message document", () => {
  it("is the committed channel.schema.json (generated from the schemas the ledger validates with; `npx vitest run -u` refreshes it)", async () => {
    await expect(JSON.stringify(channelMessageDocument(), null, 2) + "\n").toMatchFileSnapshot(
      "../channel.schema.json",
    );
  });

  it("describes every message the server sends and the host sends, and refuses what the ledger refuses", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    await call("PUT", `/v1/servers/${s.id}/desired`, {
      body: { generation: 2, agents: [{ name: "a", image: "a:1", version: "1" }] },
    });
    const ch = await openChannel(s.token, { generation: 1 });
    const hostSent = [
      { type: "hello", v: 1, generation: 2 },
      { type: "report", v: 1, id: "r1", report: report(2, [{ name: "a", image: "a:1" }]) },
      { type: "report", v: 1, id: "r2", report: report(7, []) },
    ];
    const received = [await ch.next("desired")];
    for (const m of hostSent) ch.send(m);
    received.push(await ch.next("ack"), await ch.next("ack"));
    ch.send("{nope");
    received.push(await ch.next("error"));
    await call("POST", `/v1/servers/${s.id}/refresh`);
    received.push(await ch.next("refresh"));
    await call("POST", `/v1/servers/${s.id}/decommission`);
    received.push(await ch.next("lifecycle"));
    ch.close();

    expect(received.map((m) => m.type)).toEqual(["desired", "ack", "ack", "error", "refresh", "lifecycle"]);
    const server = validator("ServerMessage");
    for (const m of received) expect(server.validate(m).errors, JSON.stringify(m)).toEqual([]);
    const host = validator("HostMessage");
    for (const m of hostSent) expect(host.validate(m).errors, JSON.stringify(m)).toEqual([]);
    expect(host.validate({ type: "report", v: 1, report: {} }).valid).toBe(false);
    expect(host.validate({ type: "launch", v: 1 }).valid).toBe(false);
    expect(server.validate({ type: "desired", v: 2, config: {} }).valid).toBe(false);
  });
});
