/**
 * A fleet's deletion racing the writes that need the fleet: whichever lands second must see that
 * the other happened. Found from outside (npm start, DELETE /v1/fleets/{id} sent together with a
 * channel PUT on a fresh fleet): both answered 2xx, and the channel outlived its fleet, to be
 * inherited by the next fleet of that name. Here the race is made deterministic by deleting the
 * fleet inside the write's own decision, after it read the fleet and before its batch.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { getDb } from "../src/db/client";
import { DomainError } from "../src/domain/errors";
import { channelWrite } from "../src/intent/batch";
import { changeIntent } from "../src/intent/service";
import { call, createFleet } from "./helpers";

describe("a fleet deleted while an intent write is being decided", () => {
  it("refuses the write as a missing fleet and leaves nothing of it behind, for a fleet of revision 0", async () => {
    const { id: fleet } = await createFleet();
    const db = getDb(env.DB);
    const write = changeIntent(db, fleet, async ({ rev }) => {
      expect(rev).toBe(0);
      // The deletion lands between the write's read and its batch.
      expect((await call("DELETE", `/v1/fleets/${fleet}`)).status).toBe(204);
      const channel = { image: "registry.example/fw:1", version: "1" };
      return { result: "written", statements: [...channelWrite(db, "test", fleet, "fw", channel, null, Date.now())] };
    });
    const refused = await write.then(
      () => null,
      (err: unknown) => err,
    );
    expect(refused).toBeInstanceOf(DomainError);
    expect((refused as DomainError).code).toBe("not_found");
    for (const table of ["agent_channels", "agent_channel_history", "fleet_intent"]) {
      const rows = await env.DB.prepare(`SELECT COUNT(*) AS n FROM ${table} WHERE fleet_id = ?`)
        .bind(fleet)
        .first<{ n: number }>();
      expect([table, rows!.n]).toEqual([table, 0]);
    }
    // A fleet of the same name starts with nothing of the deleted one.
    expect((await call("POST", "/v1/fleets", { body: { id: fleet } })).status).toBe(201);
    expect((await call("GET", `/v1/fleets/${fleet}/channels`)).json.items).toEqual([]);
  });
});
