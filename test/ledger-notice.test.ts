import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { Env } from "../src/env";
import { notifyFeed, THROTTLE_MS } from "../src/notices/notices";
import { call, createFleet, fireTimersNow, registerServer, report, settle } from "./helpers";
import { ledger, sleep } from "./support/objects";

const AGENTS = ["compute", "vm", "logs"].map((name) => ({
  name,
  image: `registry.example/${name}:1.0`,
  version: "1.0",
}));

/** A server reporting one of three agents stopped (odd) or all running (even): each a change the index shows. */
async function reportingServer() {
  const fleet = await createFleet();
  const s = await registerServer(fleet.id);
  expect((await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents: AGENTS } })).status).toBe(
    200,
  );
  const send = async (i: number) => {
    const body = report(
      2,
      AGENTS.map((a, j) => ({ ...a, state: j === 0 && i % 2 === 1 ? "stopped" : "running" })),
    );
    expect((await call("PUT", "/v1/agent/inventory", { token: s.token, body })).status).toBe(200);
    await settle(s.id);
  };
  await send(0);
  // The notices of registering and of the first report out of the way, and the fleet's window open.
  await sleep(THROTTLE_MS + 100);
  await fireTimersNow(ledger(s.id));
  await sleep(THROTTLE_MS + 100);
  return { fleet: fleet.id, server: s.id, send };
}

/** Console notices the ledger stores while `fn` runs (its outbox's `feed` rows inserted). */
async function feedsStored(server: string, fn: () => Promise<void>) {
  const stored: unknown[] = [];
  await runInDurableObject(ledger(server), (_i, state) => {
    const sql = state.storage.sql;
    const exec = sql.exec.bind(sql);
    sql.exec = ((query: string, ...bindings: unknown[]) => {
      if (query.startsWith("INSERT INTO _outbox") && bindings[0] === "feed") stored.push(bindings[2]);
      return exec(query, ...bindings);
    }) as typeof sql.exec;
  });
  try {
    await fn();
  } finally {
    await runInDurableObject(ledger(server), (_i, state) => {
      delete (state.storage.sql as { exec?: unknown }).exec; // the prototype's again
    });
  }
  return stored.length;
}

describe("a ledger's console notice", () => {
  it("is not stored when another owner's trailing notice already stands for it, and is stored when none does", async () => {
    const { fleet, server, send } = await reportingServer();
    // Nothing promised: the change's notice is stored and delivered.
    expect(await feedsStored(server, () => send(1))).toBe(1);
    await sleep(THROTTLE_MS + 100);
    // Two other servers of the fleet raise notices: the first is sent, the second promised as the
    // window's trailing notice, which goes after this change is committed.
    const fake = { FEED: { idFromName: (n: string) => n, get: () => ({ notify: async () => {} }) } } as unknown as Env;
    expect(await notifyFeed(fake, { fleet, kind: "server", from: "server:a" })).toBe("sent");
    expect(await notifyFeed(fake, { fleet, kind: "server", from: "server:b" })).toMatchObject({
      later: expect.any(Number),
    });
    expect(await feedsStored(server, () => send(2))).toBe(0);
  });
});
