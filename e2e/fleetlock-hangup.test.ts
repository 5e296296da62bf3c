/**
 * A parked FleetLock host that hangs up, over a real connection: wrangler dev never tells the
 * worker that the client went away (its proxy does not abort request.signal), so the grant that
 * reaches the hung-up request is kept only as unclaimed, and the slot goes on to the next host
 * once the group's unclaimed_grant_s has passed without the host calling again.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { request } from "node:http";
import { describe, expect, it } from "vitest";
import { adminApi } from "./harness.ts";

const api = adminApi;

const fleetlockBody = (id: string) => JSON.stringify({ client_params: { id, group: "default" } }, null, 2);

/** As Zincati sends it. */
async function zincati(base: string, op: string, id: string) {
  const res = await fetch(new URL(`v1/${op}`, base), {
    method: "POST",
    headers: { "fleet-lock-protocol": "true" },
    body: fleetlockBody(id),
  });
  return { status: res.status, json: (await res.json()) as any };
}

/** A pre-reboot whose client closes its socket after `ms`, without waiting for the answer. */
function hangUpAfter(base: string, id: string, ms: number) {
  return new Promise<void>((resolve) => {
    const body = fleetlockBody(id);
    const req = request(new URL("v1/pre-reboot", base), {
      method: "POST",
      headers: { "fleet-lock-protocol": "true", "content-length": Buffer.byteLength(body) },
    });
    req.on("error", () => resolve());
    req.end(body);
    setTimeout(() => {
      req.destroy();
      resolve();
    }, ms);
  });
}

describe("a parked host that closes its socket", () => {
  it("does not keep a slot: its grant is released after the group's bound and the next parked host gets it", async () => {
    const fleet = `hang-${Date.now().toString(36)}`;
    expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
    const base = (await api("POST", `/v1/fleets/${fleet}/fleetlock-key`)).json.base_url as string;
    expect(
      (
        await api("PUT", `/v1/fleets/${fleet}/reboot-groups/default`, {
          slots: 1,
          queue_wait_s: 60,
          unclaimed_grant_s: 5,
        })
      ).status,
    ).toBe(200);
    const ids = ["a", "b", "c"].map((n) => `${fleet}-${n}`);
    for (const id of ids) {
      const r = await api("POST", "/v1/servers", {
        fleet,
        hostname: `${id}.example.com`,
        kind: "managed",
        fleetlock_id: id,
      });
      expect(r.status).toBe(201);
    }
    const [a, b, c] = ids;
    expect((await zincati(base, "pre-reboot", a)).status).toBe(200);
    // b parks, then its client goes away; the trust bound (2 s here) passes.
    await hangUpAfter(base, b, 500);
    await sleep(2500);
    const parkedC = zincati(base, "pre-reboot", c);
    await sleep(300);
    expect((await api("GET", `/v1/fleets/${fleet}/reboot-groups/default`)).json.queue.map((q: any) => q.id)).toEqual([
      b,
      c,
    ]);

    // a is back: the slot goes to b, whose answer nobody reads; it is held for b only as unclaimed…
    expect((await zincati(base, "steady-state", a)).status).toBe(200);
    const after = (await api("GET", `/v1/fleets/${fleet}/reboot-groups/default`)).json;
    expect(after.holders.map((h: any) => h.id)).toEqual([b]);
    expect(after.holders[0].unclaimed_until).not.toBeNull();
    // …and b never calls again, so within the bound the slot is c's.
    const started = Date.now();
    const answer = await parkedC;
    expect(answer.status).toBe(200);
    expect(Date.now() - started).toBeLessThan(10_000);
    const end = (await api("GET", `/v1/fleets/${fleet}/reboot-groups/default`)).json;
    expect(end.holders.map((h: any) => h.id)).toEqual([c]);
    // Host grants and releases reach the audit log within a second or so (one D1 batch for many).
    let released = false;
    for (let i = 0; i < 50 && !released; i++) {
      const audit = (await api("GET", `/v1/audit?target=fleet:${fleet}&limit=100`)).json.items as any[];
      released = audit.some((e) => e.action === "fleetlock.release_unclaimed" && e.details.id === b);
      if (!released) await sleep(200);
    }
    expect(released).toBe(true);
  });
});
