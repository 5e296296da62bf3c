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

  it("do not act on a ledger's late answer to an image write", async () => {
    const { id: fleet } = await createFleet();
    let answerWrite!: (r: unknown) => void;
    const answer = new Promise((res) => (answerWrite = res));
    let asked = 0;
    const ledger = { applyRolloutImage: () => (asked++, answer) };
    const fakeEnv = {
      ...env,
      LEDGER: { idFromName: (n: string) => n, get: () => ledger },
    } as unknown as Env;
    let changes = 0;
    const serverId = `s-${crypto.randomUUID()}`;
    const parts = {
      clock: () => Date.now(),
      background: () => {},
      store: {
        load: () => ({ spec: { id: "r-late-apply", fleet, agent: "web", image: "img", version: "2" } }),
        targets: {
          get: () => ({
            pass: 1,
            server_id: serverId,
            state: "applying",
            generation: null,
            image: "img",
            version: "2",
          }),
        },
        transaction: () => void changes++,
      },
    } as unknown as RolloutParts;
    const effects = rolloutEffects(
      () => fakeEnv,
      () => parts,
    );
    const apply = effects.apply as { deliver(p: unknown, s: AbortSignal): Promise<void> };
    const abort = new AbortController();
    const delivered = apply.deliver({ pass: 1, server_id: serverId }, abort.signal);
    await new Promise((res) => setTimeout(res, 20));
    expect(asked).toBe(1);
    abort.abort(new Error("past the deadline"));
    answerWrite({ ok: true, outcome: "applied", generation: 7, from_image: "img", from_version: "1" });
    await expect(delivered).rejects.toThrow("past the deadline");
    expect(changes).toBe(0);
  });

  it("do not record a channel move answered past the deadline", async () => {
    const { id: fleet } = await createFleet();
    let recorded = 0;
    const parts = {
      clock: () => Date.now(),
      background: () => {},
      store: {
        load: () => ({ spec: { id: "r-late-channel", fleet, agent: "web", image: "img", version: "2" } }),
        channel: () => null,
        setChannel: () => void recorded++,
      },
    } as unknown as RolloutParts;
    const effects = rolloutEffects(
      () => env,
      () => parts,
    );
    const channel = effects.channel as { deliver(p: unknown, s: AbortSignal): Promise<void> };
    const abort = new AbortController();
    // The move's D1 reads and writes are under way when the deadline passes.
    const delivered = channel.deliver({ to: "rollout" }, abort.signal);
    abort.abort(new Error("past the deadline"));
    await expect(delivered).rejects.toThrow("past the deadline");
    expect(recorded).toBe(0);
    // The move itself happened (the retry finds it done and records it then).
    const row = await env.DB.prepare("SELECT image, version FROM agent_channels WHERE fleet_id = ? AND agent = ?")
      .bind(fleet, "web")
      .first();
    expect(row).toEqual({ image: "img", version: "2" });
  });
});
