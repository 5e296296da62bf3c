import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { Env } from "../src/env";
import { rolloutEffects } from "../src/rollouts/effects";
import type { RolloutParts } from "../src/rollouts/parts";
import { createFleet } from "./helpers";

/**
 * A call the outbox gave up on at its deadline is retried; should the receiver answer the first
 * attempt after all, that answer must not be acted on beside the retry's. A reboot slot granted
 * late would otherwise read as "the target moved on meanwhile" and be given back while the
 * target holds it.
 */
describe("a rollout's call effects past their deadline", () => {
  it("do not act on a reboot slot's late grant", async () => {
    const { id: fleet } = await createFleet();
    let grant!: (r: unknown) => void;
    const answer = new Promise((res) => (grant = res));
    const coordinator = { acquireRolloutSlot: () => answer };
    const fakeEnv = {
      ...env,
      REBOOT: { idFromName: (n: string) => n, get: () => coordinator },
    } as unknown as Env;
    let changes = 0;
    const parts = {
      clock: () => Date.now(),
      background: () => {},
      store: {
        load: () => ({ spec: { id: "r-late", fleet, reboot_slot: true } }),
        targets: {
          get: () => ({ pass: 1, server_id: "s-1", slot: "requested", state: "queued", reboot_group: "default" }),
        },
        transaction: () => void changes++,
      },
    } as unknown as RolloutParts;
    const effects = rolloutEffects(
      () => fakeEnv,
      () => parts,
    );
    const slot = effects.slot as { deliver(p: unknown, s: AbortSignal): Promise<void> };
    const abort = new AbortController();
    const delivered = slot.deliver({ pass: 1, server_id: "s-1" }, abort.signal);
    await new Promise((res) => setTimeout(res, 20));
    abort.abort(new Error("past the deadline"));
    grant({ ok: true });
    await expect(delivered).rejects.toThrow("past the deadline");
    expect(changes).toBe(0);
  });
});
