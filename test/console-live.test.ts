import { env, runInDurableObject, SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { BASE, call, createFleet, registerServer, report } from "./helpers";
import { signIn } from "./console-helpers";
import { fleetWithKey, putGroup, registerClients, zincati } from "./fleetlock-helpers";

async function openFeed(fleet: string, cookie: string, origin: string | null = BASE) {
  const headers: Record<string, string> = { Upgrade: "websocket", Cookie: cookie };
  if (origin) headers.Origin = origin;
  return SELF.fetch(`${BASE}/console/live?fleet=${fleet}`, { headers });
}

function nextMessage(ws: WebSocket, timeoutMs = 2000) {
  return new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("no message within the time")), timeoutMs);
    ws.addEventListener("message", (ev) => {
      clearTimeout(timer);
      resolve(String(ev.data));
    }, { once: true });
  });
}

describe("the console's live feed", () => {
  it("takes a socket only from this origin with a live session", async () => {
    const fleet = await createFleet();
    const s = await signIn();
    expect((await openFeed(fleet.id, "")).status).toBe(401);
    expect((await openFeed(fleet.id, s.cookie, "https://evil.example")).status).toBe(403);
    expect((await openFeed(fleet.id, s.cookie, null)).status).toBe(403);
    const ok = await openFeed(fleet.id, s.cookie);
    expect(ok.status).toBe(101);
    ok.webSocket!.accept();
    ok.webSocket!.close(1000, "done");
  });

  it("tells an open page of a report and of an operator's change in its fleet", async () => {
    const fleet = await createFleet();
    const server = await registerServer(fleet.id);
    const s = await signIn();
    const res = await openFeed(fleet.id, s.cookie);
    const ws = res.webSocket!;
    ws.accept();
    const first = nextMessage(ws);
    await call("PUT", "/v1/agent/inventory", { token: server.token, body: report(1, []) });
    expect(JSON.parse(await first)).toMatchObject({ kind: "report", ids: [server.id] });
    // Notices of one fleet are at least 500 ms apart per isolate; pages re-fetch once more after one.
    await new Promise((r) => setTimeout(r, 600));
    const second = nextMessage(ws);
    await call("PUT", `/v1/fleets/${fleet.id}/reboot-groups/night`, { body: { slots: 1 } });
    expect(JSON.parse(await second)).toMatchObject({ kind: "reboot", ids: ["night"] });
    ws.close(1000, "done");
  });

  it("tells an open page of a FleetLock grant", async () => {
    const f = await fleetWithKey();
    const [client] = await registerClients(f.fleet, 1);
    await putGroup(f.fleet, "default", { slots: 1 });
    const s = await signIn();
    const ws = (await openFeed(f.fleet, s.cookie)).webSocket!;
    ws.accept();
    // The setup's own notices (registration, group) may still be on their way: wait for the grant's.
    const seen: { kind: string }[] = [];
    ws.addEventListener("message", (ev) => seen.push(JSON.parse(String(ev.data))));
    await new Promise((r) => setTimeout(r, 700));
    seen.length = 0;
    expect((await zincati(f.baseUrl, "pre-reboot", client.id)).status).toBe(200);
    await expect.poll(() => seen.map((n) => n.kind), { timeout: 2000 }).toContain("reboot");
    ws.close(1000, "done");
  });

  it("answers keep-alive pings without waking the object, and closes a socket whose session expired", async () => {
    const fleet = await createFleet();
    const s = await signIn();
    const ws = (await openFeed(fleet.id, s.cookie)).webSocket!;
    ws.accept();
    const pong = nextMessage(ws);
    ws.send("ping");
    expect(await pong).toBe("pong");
    const stub = env.FEED.get(env.FEED.idFromName(fleet.id));
    await runInDurableObject(stub, (_i, state) => {
      for (const socket of state.getWebSockets()) socket.serializeAttachment({ until: Date.now() - 1 });
    });
    const closed = new Promise<number>((resolve) => ws.addEventListener("close", (ev) => resolve(ev.code), { once: true }));
    expect(await stub.notify({ kind: "test", ids: [], at: new Date().toISOString() })).toBe(0);
    expect(await closed).toBe(4001);
  });
});
