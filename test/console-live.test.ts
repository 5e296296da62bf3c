import { env, runInDurableObject, SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { BASE, call, createFleet, fireTimersNow, registerServer, report, settle } from "./helpers";
import { consoleFetch, signIn } from "./console-helpers";
import { fleetWithKey, putGroup, registerClients, zincati } from "./fleetlock-helpers";
import { agePastDeadlines, fleetWithAgent, rolloutStub, startRollout } from "./rollout-helpers";
import { noticeNow, notifyFeed, THROTTLE_MS } from "../src/notices/notices";
import { QUIET_TIMER, quietGraceMs } from "../src/ledger/quiet";
import type { Env } from "../src/env";

async function openFeed(fleet: string, cookie: string, origin: string | null = BASE) {
  const headers: Record<string, string> = { Upgrade: "websocket", Cookie: cookie };
  if (origin) headers.Origin = origin;
  return SELF.fetch(`${BASE}/console/live?fleet=${fleet}`, { headers });
}

function nextMessage(ws: WebSocket, timeoutMs = 2000) {
  return new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("no message within the time")), timeoutMs);
    ws.addEventListener(
      "message",
      (ev) => {
        clearTimeout(timer);
        resolve(String(ev.data));
      },
      { once: true },
    );
  });
}

/** A page on the fleet's feed once the notices of its setup went by: what it hears from now on. */
async function quietFeed(fleet: string) {
  const s = await signIn();
  const ws = (await openFeed(fleet, s.cookie)).webSocket!;
  ws.accept();
  const seen: { kind: string; ids: string[] }[] = [];
  ws.addEventListener("message", (ev) => seen.push(JSON.parse(String(ev.data))));
  await new Promise((r) => setTimeout(r, 1200));
  seen.length = 0;
  return { ws, seen };
}

/** An open page's socket and when (and how) it closed. */
async function openPage(fleet: string, cookie: string) {
  const ws = (await openFeed(fleet, cookie)).webSocket!;
  ws.accept();
  const closed = new Promise<{ code: number; reason: string; at: number }>((resolve) =>
    ws.addEventListener("close", (ev) => resolve({ code: ev.code, reason: ev.reason, at: Date.now() }), { once: true }),
  );
  return { ws, closed };
}

const within = <T>(p: Promise<T>, ms: number) =>
  Promise.race([p, new Promise<"open">((r) => setTimeout(() => r("open"), ms))]);

describe("a console page's live socket when its session ends", () => {
  it("closes within 2 s of its sign-out, with the session-ended code, and leaves another session's open", async () => {
    const fleet = await createFleet();
    const other = await createFleet();
    const s = await signIn();
    const bystander = await signIn();
    const pages = [await openPage(fleet.id, s.cookie), await openPage(other.id, s.cookie)];
    const kept = await openPage(fleet.id, bystander.cookie);
    const t0 = Date.now();
    const out = await consoleFetch("/console/sign-out", { cookie: s.cookie, body: { _csrf: s.csrf } });
    expect(out.status).toBe(303);
    for (const page of pages) {
      const closed = await within(page.closed, 2000);
      expect(closed).toMatchObject({ code: 4001, reason: "signed out" });
      if (closed !== "open") console.log(`socket closed ${closed.at - t0} ms after the sign-out was sent`);
      if (closed !== "open") expect(closed.at - t0).toBeLessThan(2000);
    }
    expect(await within(kept.closed, 300)).toBe("open");
    kept.ws.close(1000, "done");
  });

  it("closes within 2 s of its token's revocation, every session of that token and no other", async () => {
    const fleet = await createFleet();
    const minted = await call("POST", "/v1/tokens", { body: { name: "wall screen", scope: "read" } });
    expect(minted.status).toBe(201);
    const first = await signIn(minted.json.token);
    const second = await signIn(minted.json.token);
    const admin = await signIn();
    const pages = [await openPage(fleet.id, first.cookie), await openPage(fleet.id, second.cookie)];
    const kept = await openPage(fleet.id, admin.cookie);
    const t0 = Date.now();
    expect((await call("DELETE", `/v1/tokens/${minted.json.id}`)).status).toBe(200);
    for (const page of pages) {
      const closed = await within(page.closed, 2000);
      expect(closed).toMatchObject({ code: 4001, reason: "token revoked" });
      if (closed !== "open") console.log(`socket closed ${closed.at - t0} ms after the revocation was sent`);
    }
    expect(await within(kept.closed, 300)).toBe("open");
    // A socket opened with the revoked token's session afterwards is refused outright.
    expect((await openFeed(fleet.id, first.cookie)).status).toBe(401);
    kept.ws.close(1000, "done");
  });
});

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
    expect(JSON.parse(await first)).toMatchObject({ kind: "server", ids: [server.id] });
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

  it("tells an open page of a change an object made on its own (a rollout target timing out), without any request", async () => {
    const { fleet } = await fleetWithAgent(1);
    const r = await startRollout({ fleet, concurrency: 1, server_timeout_s: 30 });
    const { ws, seen } = await quietFeed(fleet);
    // Nobody calls the API: its deadline passes, the rollout's timer fires, the target times out,
    // the index is told, and the rollout's outbox tells the fleet's feed.
    await agePastDeadlines(r.id, 31_000);
    await fireTimersNow(rolloutStub(r.id));
    await expect
      .poll(
        async () => {
          await fireTimersNow(rolloutStub(r.id));
          return seen.map((n) => n.kind);
        },
        { timeout: 4000, interval: 300 },
      )
      .toContain("rollout");
    expect(seen.find((n) => n.kind === "rollout")).toMatchObject({ ids: [r.id] });
    ws.close(1000, "done");
  });

  it("tells an open page when the quiet watch finds a host silent (its server stale in the index), without any request, and when it is back", async () => {
    const fleet = await createFleet({ stale_after_s: 120 });
    const server = await registerServer(fleet.id);
    await call("PUT", "/v1/agent/inventory", { token: server.token, body: report(1, []) });
    await settle(server.id);
    const { ws, seen } = await quietFeed(fleet.id);
    const ledger = env.LEDGER.get(env.LEDGER.idFromName(server.id));
    // As if the host had said nothing since stale_after and the watch's grace: its timer is due.
    await runInDurableObject(ledger, async (instance, state) => {
      const store = (instance as unknown as { parts: { store: { load(): any; save(p: unknown): void } } }).parts.store;
      const { report: stored } = store.load();
      store.save({ report: { ...stored, received_at: Date.now() - 120_000 - quietGraceMs(120) - 1_000 } });
      state.storage.sql.exec("UPDATE _timers SET due_at = ? WHERE name = ?", Date.now() - 1, QUIET_TIMER);
    });
    await expect
      .poll(
        async () => {
          await fireTimersNow(ledger);
          return seen;
        },
        { timeout: 4000, interval: 300 },
      )
      .toEqual([expect.objectContaining({ kind: "server", ids: [server.id] })]);
    // The host speaks again, with the same report: the index shows it live again, and so must the page.
    await call("PUT", "/v1/agent/inventory", { token: server.token, body: report(1, []) });
    await settle(server.id);
    await expect
      .poll(
        async () => {
          await fireTimersNow(ledger);
          return seen.length;
        },
        { timeout: 4000, interval: 300 },
      )
      .toBe(2);
    expect(seen[1]).toMatchObject({ kind: "server", ids: [server.id] });
    ws.close(1000, "done");
  });

  it("sends no notice for a report that changes nothing, and one for a report that changes the server's status", async () => {
    const fleet = await createFleet();
    const server = await registerServer(fleet.id);
    const agents = [{ name: "a", image: "registry.example/a:1" }];
    expect(
      (
        await call("PUT", `/v1/servers/${server.id}/desired`, {
          body: { generation: 2, agents: [{ ...agents[0], version: "1" }] },
        })
      ).status,
    ).toBeLessThan(300);
    await call("PUT", "/v1/agent/inventory", { token: server.token, body: report(2, agents) });
    await settle(server.id);
    const { ws, seen } = await quietFeed(fleet.id);

    // The same report again (a host's steady heartbeat): the index shows nothing new.
    expect((await call("PUT", "/v1/agent/inventory", { token: server.token, body: report(2, agents) })).status).toBe(
      200,
    );
    await settle(server.id);
    await new Promise((r) => setTimeout(r, 800));
    expect(seen).toEqual([]);

    // The agent stopped: the server's status changes, and the page hears of it.
    expect(
      (
        await call("PUT", "/v1/agent/inventory", {
          token: server.token,
          body: report(2, [{ ...agents[0], state: "stopped" }]),
        })
      ).status,
    ).toBe(200);
    await settle(server.id);
    await expect
      .poll(() => seen, { timeout: 2000 })
      .toEqual([expect.objectContaining({ kind: "server", ids: [server.id] })]);
    ws.close(1000, "done");
  });

  it("coalesces a busy fleet's notices to one call to its feed per 500 ms: one trailing notice stands for the rest", async () => {
    const calls: unknown[] = [];
    const fake = {
      FEED: { idFromName: (n: string) => n, get: () => ({ notify: async (b: unknown) => void calls.push(b) }) },
    } as unknown as Env;
    const fleet = `busy-${crypto.randomUUID()}`;
    const t0 = Date.now();
    const answers = [];
    for (let i = 0; i < 50; i++)
      answers.push(await notifyFeed(fake, { fleet, kind: "server", ids: [`s${i}`], from: `server:s${i}` }, t0 + i));
    expect(calls).toHaveLength(1);
    // The second becomes the window's trailing notice (its outbox keeps it until then); the rest are covered by it.
    expect(answers[1]).toEqual({ later: t0 + THROTTLE_MS });
    expect(answers.slice(2).every((a) => a === "covered")).toBe(true);
    // Its holder asking early is told to wait again, never dropped; at the window's end it goes.
    expect(await notifyFeed(fake, { fleet, kind: "server", from: "server:s1" }, t0 + 100)).toEqual({
      later: t0 + THROTTLE_MS,
    });
    expect(await notifyFeed(fake, { fleet, kind: "server", from: "server:s1" }, t0 + THROTTLE_MS)).toBe("sent");
    expect(calls).toHaveLength(2);
  });

  it("a service's notice told to wait keeps coming back until it is sent, even when another owner took the window it waited for", async () => {
    const calls: { ids: string[] }[] = [];
    const fake = {
      FEED: {
        idFromName: (n: string) => n,
        get: () => ({ notify: async (b: { ids: string[] }) => void calls.push(b) }),
      },
    } as unknown as Env;
    const fleet = `race-${crypto.randomUUID()}`;
    const t0 = Date.now();
    expect(await notifyFeed(fake, { fleet, kind: "server", ids: ["first"], from: "server:a" }, t0)).toBe("sent");
    const opens = t0 + THROTTLE_MS;
    // Another owner's notice lands as the window opens, just before the service's comes back.
    const other = new Promise((res) =>
      setTimeout(
        () => res(notifyFeed(fake, { fleet, kind: "server", ids: ["other"], from: "server:b" }, opens)),
        Math.max(0, opens - Date.now() - 100),
      ),
    );
    await noticeNow(fake, { fleet, kind: "fleet", ids: ["service"], from: "service:intent" });
    expect(await other).toBe("sent");
    expect(calls.map((c) => c.ids[0])).toEqual(["first", "other", "service"]);
  });

  it("a service's notice whose feed call fails is sent again, and a feed that keeps failing is tried a bounded number of times", async () => {
    let failing = 1;
    const tries: string[] = [];
    const fake = {
      FEED: {
        idFromName: (n: string) => n,
        get: () => ({
          notify: async (b: { ids: string[] }) => {
            tries.push(b.ids[0]!);
            if (failing-- > 0) throw new Error("simulated: the feed's call failed");
          },
        }),
      },
    } as unknown as Env;
    const fleet = `flaky-${crypto.randomUUID()}`;
    await noticeNow(fake, { fleet, kind: "fleet", ids: ["service"], from: "service:intent" });
    // Tried, failed, tried again and delivered: the page hears of the change.
    expect(tries).toEqual(["service", "service"]);

    failing = Infinity;
    tries.length = 0;
    const started = Date.now();
    await noticeNow(fake, {
      fleet: `down-${crypto.randomUUID()}`,
      kind: "fleet",
      ids: ["gone"],
      from: "service:intent",
    });
    expect(tries.length).toBe(5);
    // Bounded in time too: well inside the request's background allowance.
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it("closes a page's socket that sends anything but ping (1008), and the fleet's other pages still hear", async () => {
    const fleet = await createFleet();
    const server = await registerServer(fleet.id);
    const s = await signIn();
    const other = await openPage(fleet.id, s.cookie);
    for (const junk of ["hello", "{}", "x".repeat(512 * 1024), new Uint8Array([1, 2, 3])]) {
      const page = await openPage(fleet.id, s.cookie);
      page.ws.send(junk);
      const closed = await within(page.closed, 2000);
      expect(closed === "open" ? closed : closed.code, String(junk).slice(0, 20)).toBe(1008);
    }
    const heard = nextMessage(other.ws);
    await call("PUT", "/v1/agent/inventory", { token: server.token, body: report(1, []) });
    expect(JSON.parse(await heard)).toMatchObject({ kind: "server", ids: [server.id] });
    const pong = nextMessage(other.ws);
    other.ws.send("ping");
    expect(await pong).toBe("pong");
    other.ws.close(1000, "done");
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
    const closed = new Promise<number>((resolve) =>
      ws.addEventListener("close", (ev) => resolve(ev.code), { once: true }),
    );
    expect(await stub.notify({ kind: "test", ids: [], at: new Date().toISOString() })).toBe(0);
    expect(await closed).toBe(4001);
  });
});
