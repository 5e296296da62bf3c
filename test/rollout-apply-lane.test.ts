import { describe, expect, it } from "vitest";
import type { Env } from "../src/env";
import { Pool } from "../src/objects/kit/pool";
import { CALL_CONCURRENCY, rolloutEffects } from "../src/rollouts/effects";
import type { RolloutParts } from "../src/rollouts/parts";

// The lane is read from the payload alone: neither the env nor the object's parts are touched.
const effects = rolloutEffects(
  () => ({}) as Env,
  () => ({}) as RolloutParts,
);
const laneOf = (payload: { pass: number; server_id: string }) =>
  (effects.apply as { lane?: (p: unknown) => string }).lane?.(payload);

describe("a rollout's writes into a server's ledger", () => {
  it("share one lane per server whatever their pass; other servers' writes have their own", () => {
    expect(laneOf({ pass: 0, server_id: "s1" })).toBeDefined();
    expect(laneOf({ pass: 0, server_id: "s1" })).toBe(laneOf({ pass: 1, server_id: "s1" }));
    expect(laneOf({ pass: 0, server_id: "s1" })).not.toBe(laneOf({ pass: 0, server_id: "s2" }));
  });

  it("go one at a time into one ledger, in the order given, while another ledger's go meanwhile", async () => {
    const pool = new Pool(CALL_CONCURRENCY);
    const log: string[] = [];
    const gates: Record<string, () => void> = {};
    const write = (pass: number, server_id: string) =>
      pool.run(async () => {
        log.push(`start ${pass}:${server_id}`);
        await new Promise<void>((res) => (gates[`${pass}:${server_id}`] = res));
        log.push(`end ${pass}:${server_id}`);
      }, laneOf({ pass, server_id }));
    const all = [write(0, "s1"), write(1, "s1"), write(0, "s2")];
    await Promise.resolve();
    await Promise.resolve();
    expect(log).toEqual(["start 0:s1", "start 0:s2"]);
    gates["0:s2"]();
    gates["0:s1"]();
    await all[0];
    await new Promise((res) => setTimeout(res, 0));
    expect(log).toContain("start 1:s1");
    expect(log.indexOf("start 1:s1")).toBeGreaterThan(log.indexOf("end 0:s1"));
    gates["1:s1"]();
    await Promise.all(all);
  });
});
