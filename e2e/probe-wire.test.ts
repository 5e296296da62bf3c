/**
 * An outsider's probes over real sockets against the private local server (wrangler dev), where
 * the Workers-runtime tests cannot reach: a body that never comes, a Content-Length that lies,
 * headers that never end, a channel socket that never reads, and the same write sent many times
 * at once. Each probe checks that the server answers everyone else meanwhile, answers the prober
 * in the error shape (never a 500), and writes nothing it did not acknowledge.
 */
import { createServer } from "node:http";
import { connect } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, inject, it } from "vitest";
import { adminApi } from "./harness.ts";

const url = new URL(inject("hmUrl"));
const admin = inject("hmAdmin");
const api = adminApi;
const uniq = (p: string) => `${p}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 7)}`;

/** A raw connection to the server; `sent` writes bytes as given, `answer` is all it ever read. */
function raw() {
  const socket = connect(Number(url.port), url.hostname);
  let text = "";
  socket.setEncoding("latin1");
  socket.on("data", (d: string) => void (text += d));
  socket.on("error", () => {});
  const closed = new Promise<void>((r) => socket.on("close", () => r()));
  const opened = new Promise<void>((r) => socket.on("connect", () => r()));
  return { socket, opened, closed, answer: () => text };
}

/** Status and body of the first HTTP answer in what a raw socket read. */
function firstAnswer(text: string) {
  const m = /^HTTP\/1\.1 (\d{3})/.exec(text);
  const body = text.slice(text.indexOf("\r\n\r\n") + 4);
  const json = (() => {
    const start = body.indexOf("{");
    try {
      return start < 0 ? null : JSON.parse(body.slice(start, body.lastIndexOf("}") + 1));
    } catch {
      return null;
    }
  })();
  return { status: m ? Number(m[1]) : null, json };
}

/** Ms that a plain authenticated read takes while the probe holds its socket open. */
async function readLatency() {
  const at = Date.now();
  const res = await api("GET", "/v1/status");
  expect(res.status).toBe(200);
  return Date.now() - at;
}

const head = (method: string, path: string, headers: Record<string, string | number>) =>
  `${method} ${path} HTTP/1.1\r\nHost: ${url.host}\r\n` +
  Object.entries(headers)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join("") +
  "\r\n";

async function fleetExists(id: string) {
  return (await api("GET", `/v1/fleets/${id}`)).status === 200;
}

/** A host whose desired config names the image: its token downloads the blob, as a host does. */
async function hostToken(image: { id: string; name: string }) {
  const fleet = uniq("blob");
  expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
  const s = (await api("POST", "/v1/servers", { fleet, hostname: `${fleet}.example.com`, kind: "managed" })).json;
  const put = await api("PUT", `/v1/servers/${s.id}/desired`, {
    generation: 2,
    agents: [{ name: image.name, image_id: image.id }],
  });
  expect(put.status, JSON.stringify(put.json)).toBe(200);
  return s.token as string;
}

describe("a client that never finishes its request", () => {
  it("whose body never comes holds up nobody else, and its fleet is not created when it hangs up", async () => {
    const id = uniq("hang");
    const probes: ReturnType<typeof raw>[] = [];
    // Several at once, each promising 1000 bytes and sending 10.
    for (let i = 0; i < 6; i++) {
      const r = raw();
      await r.opened;
      r.socket.write(
        head("POST", "/v1/fleets", {
          authorization: `Bearer ${admin}`,
          "content-type": "application/json",
          "content-length": 1000,
        }) + `{"id":"${id}"`,
      );
      probes.push(r);
    }
    await sleep(300);
    for (let i = 0; i < 5; i++) expect(await readLatency()).toBeLessThan(2_000);
    for (const p of probes) p.socket.destroy();
    await Promise.all(probes.map((p) => p.closed));
    await sleep(300);
    expect(await fleetExists(id)).toBe(false);
    expect((await api("GET", `/v1/audit?target=fleet:${id}`)).json.items).toEqual([]);
  });

  it("whose headers never end holds up nobody else", async () => {
    const probes: ReturnType<typeof raw>[] = [];
    for (let i = 0; i < 6; i++) {
      const r = raw();
      await r.opened;
      r.socket.write(`POST /v1/fleets HTTP/1.1\r\nHost: ${url.host}\r\nauthorization: Bearer ${admin}\r\nx-slow: `);
      probes.push(r);
    }
    await sleep(300);
    for (let i = 0; i < 5; i++) expect(await readLatency()).toBeLessThan(2_000);
    for (const p of probes) p.socket.destroy();
  });

  it("whose Content-Length promises more than it sends before hanging up writes nothing", async () => {
    const id = uniq("short");
    const body = JSON.stringify({ id });
    const r = raw();
    await r.opened;
    r.socket.write(
      head("POST", "/v1/fleets", {
        authorization: `Bearer ${admin}`,
        "content-type": "application/json",
        "content-length": body.length + 50,
      }) + body,
    );
    await sleep(500);
    r.socket.end();
    await r.closed;
    await sleep(300);
    expect(await fleetExists(id)).toBe(false);
  });

  it("whose Content-Length promises less than it sends is answered from the promised bytes alone: 400, not 500", async () => {
    const id = uniq("long");
    const body = JSON.stringify({ id });
    const r = raw();
    await r.opened;
    r.socket.write(
      head("POST", "/v1/fleets", {
        authorization: `Bearer ${admin}`,
        "content-type": "application/json",
        "content-length": 5,
        connection: "close",
      }) + body,
    );
    await Promise.race([r.closed, sleep(5_000)]);
    r.socket.destroy();
    const { status, json } = firstAnswer(r.answer());
    expect(status).toBe(400);
    expect(json?.error?.code).toMatch(/^[a-z_]+$/);
    expect(await fleetExists(id)).toBe(false);
  });
});

describe("an upload part that never arrives whole", () => {
  it("is not recorded when its client hangs up halfway, stalls or lies, and a whole part afterwards completes the image", async () => {
    const { createHash } = await import("node:crypto");
    const bytes = Buffer.alloc(300_000, 3);
    const digest = `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
    const reg = await api("POST", "/v1/images", {
      name: uniq("half"),
      version: "1",
      kind: "tarball",
      digest,
      size: bytes.length,
    });
    expect(reg.status, JSON.stringify(reg.json)).toBe(201);
    const id = reg.json.id as string;
    const partHead = (length: number) =>
      head("PUT", `/v1/images/${id}/parts/1`, {
        authorization: `Bearer ${admin}`,
        "content-type": "application/octet-stream",
        "content-length": length,
      });
    // Half the bytes, then the socket is gone.
    const half = raw();
    await half.opened;
    half.socket.write(partHead(bytes.length));
    half.socket.write(bytes.subarray(0, bytes.length / 2));
    await sleep(300);
    half.socket.destroy();
    // Half the bytes, then nothing: a stalled sender, left open while the rest goes on.
    const stalled = raw();
    await stalled.opened;
    stalled.socket.write(partHead(bytes.length));
    stalled.socket.write(bytes.subarray(0, bytes.length / 2));
    await sleep(500);
    let got = (await api("GET", `/v1/images/${id}`)).json;
    expect([got.state, got.upload?.received]).toEqual(["uploading", []]);
    expect((await api("POST", `/v1/images/${id}/complete`)).status).toBe(409);
    // The whole part, sent beside the stalled one, is taken and completes the image.
    const whole = await fetch(new URL(`/v1/images/${id}/parts/1`, url), {
      method: "PUT",
      headers: { authorization: `Bearer ${admin}`, "content-type": "application/octet-stream" },
      body: bytes,
    });
    expect(whole.status, await whole.text()).toBe(200);
    const done = await api("POST", `/v1/images/${id}/complete`);
    expect(done.status, JSON.stringify(done.json)).toBe(200);
    // The stalled sender finishing now, with other bytes, is refused, and the ready image keeps its own.
    stalled.socket.write(Buffer.alloc(bytes.length / 2, 9));
    for (let i = 0; i < 100 && !stalled.answer().includes("\r\n\r\n"); i++) await sleep(50);
    const late = firstAnswer(stalled.answer());
    stalled.socket.destroy();
    expect(late.status, stalled.answer().slice(0, 300)).toBeGreaterThanOrEqual(400);
    expect(late.status).toBeLessThan(500);
    got = (await api("GET", `/v1/images/${id}`)).json;
    expect([got.state, got.digest, got.size]).toEqual(["ready", digest, bytes.length]);
    const blob = await fetch(new URL(`/v1/agent/images/${id}/blob`, url), {
      headers: { authorization: `Bearer ${await hostToken(reg.json)}` },
    });
    expect(blob.status).toBe(200);
    expect(
      `sha256:${createHash("sha256")
        .update(Buffer.from(await blob.arrayBuffer()))
        .digest("hex")}`,
    ).toBe(digest);
  });
});

describe("a channel socket that never reads", () => {
  it("delays no operator write that pushes to it, nor the host's own HTTP report", async () => {
    const fleet = uniq("deaf");
    expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
    const s = (await api("POST", "/v1/servers", { fleet, hostname: `${fleet}.example.com`, kind: "managed" })).json;
    const r = raw();
    await r.opened;
    r.socket.write(
      head("GET", "/v1/agent/channel", {
        authorization: `Bearer ${s.token}`,
        upgrade: "websocket",
        connection: "Upgrade",
        "sec-websocket-version": 13,
        "sec-websocket-key": Buffer.from("probe-never-read").toString("base64"),
        "sec-websocket-protocol": "harbormaster.v1",
      }),
    );
    await sleep(500);
    expect(r.answer()).toMatch(/^HTTP\/1\.1 101/);
    // From now on nothing is read: the kernel's buffers fill with pushes nobody takes.
    r.socket.pause();
    const big = Array.from({ length: 64 }, (_, i) => ({
      name: `a${i}`,
      image: `reg/${"x".repeat(200)}:${i}`,
      version: "1",
    }));
    const slowest = { put: 0 };
    for (let g = 2; g < 42; g++) {
      const at = Date.now();
      const res = await api("PUT", `/v1/servers/${s.id}/desired`, { generation: g, agents: big });
      expect(res.status, JSON.stringify(res.json)).toBe(200);
      slowest.put = Math.max(slowest.put, Date.now() - at);
    }
    expect(slowest.put).toBeLessThan(3_000);
    r.socket.destroy();
  });
});

describe("many long polls, some hung up", () => {
  it("answers 40 parked desired polls and 40 parked server reads within moments of one change, hung-up ones costing nothing", async () => {
    const fleet = uniq("polls");
    expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
    const s = (await api("POST", "/v1/servers", { fleet, hostname: `${fleet}.example.com`, kind: "managed" })).json;
    expect((await api("PUT", `/v1/servers/${s.id}/desired`, { generation: 2, agents: [] })).status).toBe(200);
    const first = await fetch(new URL("/v1/agent/desired", url), { headers: { authorization: `Bearer ${s.token}` } });
    const etag = first.headers.get("etag")!;
    await first.body?.cancel();
    const serverTag = (
      await fetch(new URL(`/v1/servers/${s.id}`, url), { headers: { authorization: `Bearer ${admin}` } })
    ).headers.get("etag")!;
    const aborts: AbortController[] = [];
    const park = (path: string, token: string, tag: string, hangUp: boolean) => {
      const ac = new AbortController();
      if (hangUp) aborts.push(ac);
      return fetch(new URL(path, url), {
        headers: { authorization: `Bearer ${token}`, "if-none-match": tag },
        signal: ac.signal,
      }).then(
        async (r) => ({ status: r.status, at: Date.now(), body: await r.text() }),
        () => ({ status: 0, at: Date.now(), body: "" }),
      );
    };
    const polls = Array.from({ length: 40 }, (_, i) => park("/v1/agent/desired?wait=30", s.token, etag, i % 4 === 0));
    const reads = Array.from({ length: 40 }, (_, i) =>
      park(`/v1/servers/${s.id}?wait=30`, admin, serverTag, i % 4 === 0),
    );
    await sleep(1_500);
    for (const ac of aborts) ac.abort();
    await sleep(300);
    // Everyone else is still served at once while 80 requests are parked.
    expect(await readLatency()).toBeLessThan(2_000);
    const changed = Date.now();
    expect((await api("PUT", `/v1/servers/${s.id}/desired`, { generation: 3, agents: [] })).status).toBe(200);
    const done = await Promise.all([...polls, ...reads]);
    const answered = done.filter((d) => d.status !== 0);
    expect(answered).toHaveLength(60);
    for (const d of answered) expect(d.status, d.body.slice(0, 100)).toBe(200);
    expect(Math.max(...answered.map((d) => d.at - changed))).toBeLessThan(5_000);
  }, 60_000);
});

describe("a webhook receiver that accepts and never answers", () => {
  it("holds up no operator's test request, and only its own deliveries: a healthy receiver's test arrives meanwhile", async () => {
    const sockets = new Set<import("node:net").Socket>();
    const hanging = createServer(() => {});
    hanging.on("connection", (s) => sockets.add(s));
    let received = 0;
    const healthy = createServer((req, res) => {
      req.resume();
      req.on("end", () => {
        received++;
        res.end("ok");
      });
    });
    const port = (srv: ReturnType<typeof createServer>) =>
      new Promise<number>((r) => srv.listen(0, "127.0.0.1", () => r((srv.address() as { port: number }).port)));
    const [hp, gp] = [await port(hanging), await port(healthy)];
    try {
      const fleet = uniq("hook");
      expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
      const hook = async (p: number) => {
        const r = await api("POST", `/v1/fleets/${fleet}/webhooks`, {
          url: `http://127.0.0.1:${p}/hook`,
          events: ["server.registered"],
          secret: "s".repeat(32),
        });
        expect(r.status, JSON.stringify(r.json)).toBe(201);
        return r.json.webhook.id as string;
      };
      const [stuck, fine] = [await hook(hp), await hook(gp)];
      let slowest = 0;
      for (let i = 0; i < 5; i++) {
        const at = Date.now();
        expect((await api("POST", `/v1/fleets/${fleet}/webhooks/${stuck}/test`)).status).toBe(202);
        slowest = Math.max(slowest, Date.now() - at);
      }
      expect(slowest).toBeLessThan(2_000);
      const at = Date.now();
      expect((await api("POST", `/v1/fleets/${fleet}/webhooks/${fine}/test`)).status).toBe(202);
      while (received === 0 && Date.now() - at < 15_000) await sleep(100);
      expect(received).toBeGreaterThan(0);
      expect(Date.now() - at).toBeLessThan(10_000);
    } finally {
      for (const s of sockets) s.destroy();
      hanging.close();
      healthy.close();
    }
  }, 40_000);
});

describe("the same write sent many times at once", () => {
  it("creates one fleet: one 201, the rest 409 already_exists, one audit row", async () => {
    const id = uniq("race");
    const answers = await Promise.all(Array.from({ length: 8 }, () => api("POST", "/v1/fleets", { id })));
    const statuses = answers.map((a) => a.status).sort();
    expect(statuses).toEqual([201, 409, 409, 409, 409, 409, 409, 409]);
    for (const a of answers.filter((a) => a.status === 409)) expect(a.json.error.code).toBe("already_exists");
    const audit = (await api("GET", `/v1/audit?target=fleet:${id}`)).json.items as any[];
    expect(audit.filter((e) => e.action === "fleet.create")).toHaveLength(1);
  });

  it("registers one server per hostname, however many registrations race", async () => {
    const fleet = uniq("reg");
    expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
    const body = { fleet, hostname: `${fleet}.example.com`, kind: "managed" };
    const answers = await Promise.all(Array.from({ length: 8 }, () => api("POST", "/v1/servers", body)));
    expect(answers.filter((a) => a.status === 201)).toHaveLength(1);
    for (const a of answers.filter((a) => a.status !== 201))
      expect([a.status, a.json.error.code]).toEqual([409, "hostname_taken"]);
    const list = (await api("GET", `/v1/servers?fleet=${fleet}`)).json.items as any[];
    expect(list).toHaveLength(1);
  });

  it("lets a one-use enrollment token enroll one machine of eight racing, and counts one use", async () => {
    const fleet = uniq("enr");
    expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
    const t = await api("POST", `/v1/fleets/${fleet}/enrollment-tokens`, {
      name: "race",
      max_uses: 1,
      expires_at: new Date(Date.now() + 3_600_000).toISOString(),
    });
    expect(t.status, JSON.stringify(t.json)).toBe(201);
    const answers = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        fetch(new URL("/v1/agent/enroll", url), {
          method: "POST",
          headers: { authorization: `Bearer ${t.json.token}`, "content-type": "application/json" },
          body: JSON.stringify({ hostname: `m${i}.${fleet}.example.com`, machine_id: `${fleet}-m${i}`, boot_id: "b" }),
        }).then(async (r) => ({ status: r.status, json: (await r.json()) as any })),
      ),
    );
    const statuses = answers.map((a) => a.status);
    expect(
      statuses.filter((s) => s === 201),
      JSON.stringify(answers.map((a) => a.json)),
    ).toHaveLength(1);
    expect(
      statuses.every((s) => s === 201 || (s >= 400 && s < 500)),
      JSON.stringify(statuses),
    ).toBe(true);
    expect((await api("GET", `/v1/servers?fleet=${fleet}`)).json.items).toHaveLength(1);
    expect((await api("GET", `/v1/fleets/${fleet}/enrollment-tokens/${t.json.id}`)).json.uses).toBe(1);
  });

  it("lets one of two spec applies made from the same ETag win; the other is refused 412 and changes nothing", async () => {
    const fleet = uniq("spec");
    expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
    const got = await fetch(new URL(`/v1/fleets/${fleet}/spec`, url), {
      headers: { authorization: `Bearer ${admin}` },
    });
    const etag = got.headers.get("etag")!;
    const spec = (await got.json()) as any;
    expect(etag).toBeTruthy();
    const put = (stale: number) =>
      fetch(new URL(`/v1/fleets/${fleet}/spec`, url), {
        method: "PUT",
        headers: { authorization: `Bearer ${admin}`, "content-type": "application/json", "if-match": etag },
        body: JSON.stringify({ ...spec, settings: { ...spec.settings, stale_after_s: stale } }),
      }).then(async (r) => ({ status: r.status, json: (await r.json()) as any, stale }));
    const answers = await Promise.all([601, 602, 603, 604].map(put));
    const won = answers.filter((a) => a.status === 200);
    expect(won, JSON.stringify(answers)).toHaveLength(1);
    for (const a of answers.filter((a) => a.status !== 200))
      expect([a.status, a.json.error.code]).toEqual([412, "precondition_failed"]);
    expect((await api("GET", `/v1/fleets/${fleet}`)).json.stale_after_s).toBe(won[0]!.stale);
  });

  it("rotating a server token while its old token reports leaves exactly one token working", async () => {
    const fleet = uniq("rot");
    expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
    const s = (await api("POST", "/v1/servers", { fleet, hostname: `${fleet}.example.com`, kind: "managed" })).json;
    expect((await api("PUT", `/v1/servers/${s.id}/desired`, { generation: 2, agents: [] })).status).toBe(200);
    const report = (token: string) =>
      fetch(new URL("/v1/agent/inventory", url), {
        method: "PUT",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify({
          generation: 2,
          reconciled_at: new Date().toISOString(),
          boot_id: "b",
          agents: [],
          errors: [],
          assignments: { units: [], storage: [] },
        }),
      }).then(async (r) => ({ status: r.status, json: (await r.json()) as any }));
    const [reports, rotated] = await Promise.all([
      Promise.all(Array.from({ length: 6 }, () => report(s.token))),
      api("POST", `/v1/servers/${s.id}/token`),
    ]);
    expect(rotated.status, JSON.stringify(rotated.json)).toBe(200);
    for (const r of reports) expect([200, 401], JSON.stringify(r.json)).toContain(r.status);
    expect((await report(s.token)).status).toBe(401);
    expect((await report(rotated.json.token)).status).toBe(200);
  });

  it("starts one rollout per fleet and agent: identical starts racing answer it (201), different ones 409", async () => {
    const fleet = uniq("ro");
    expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
    expect((await api("PUT", `/v1/fleets/${fleet}/channels/fw`, { image: "reg/fw:1", version: "1" })).status).toBe(200);
    expect((await api("PUT", `/v1/fleets/${fleet}/roles/edge`, { agents: [{ name: "fw" }] })).status).toBe(200);
    for (let i = 0; i < 2; i++) {
      const r = await api("POST", "/v1/servers", {
        fleet,
        hostname: `r${i}.${fleet}.example.com`,
        kind: "managed",
        roles: ["edge"],
      });
      expect(r.status).toBe(201);
    }
    const body = (concurrency: number) => ({ fleet, agent: "fw", image: "reg/fw:2", version: "2", concurrency });
    const answers = await Promise.all([1, 2, 1, 2, 1, 2].map((c) => api("POST", "/v1/rollouts", body(c))));
    const started = answers.filter((a) => a.status === 201);
    expect(new Set(started.map((a) => a.json.id)).size, JSON.stringify(answers)).toBe(1);
    expect(new Set(started.map((a) => a.json.concurrency)).size).toBe(1);
    expect(started).toHaveLength(3);
    for (const a of answers.filter((a) => a.status !== 201))
      expect([a.status, a.json.error.code, a.json.error.details?.rollout_id]).toEqual([
        409,
        "rollout_in_progress",
        started[0]!.json.id,
      ]);
    const list = (await api("GET", `/v1/rollouts?fleet=${fleet}`)).json.items as any[];
    expect(list).toHaveLength(1);
    expect((await api("POST", `/v1/rollouts/${list[0].id}/cancel`)).status).toBe(200);
  });

  it("answers one enrollment token to creates racing under one Idempotency-Key, and exactly one secret it answered enrolls", async () => {
    const fleet = uniq("idem");
    expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
    const key = crypto.randomUUID();
    const body = JSON.stringify({ name: "idem", expires_at: new Date(Date.now() + 3_600_000).toISOString() });
    const answers = await Promise.all(
      Array.from({ length: 6 }, () =>
        fetch(new URL(`/v1/fleets/${fleet}/enrollment-tokens`, url), {
          method: "POST",
          headers: { authorization: `Bearer ${admin}`, "content-type": "application/json", "idempotency-key": key },
          body,
        }).then(async (r) => ({ status: r.status, json: (await r.json()) as any })),
      ),
    );
    const ok = answers.filter((a) => a.status === 201);
    expect(ok.length, JSON.stringify(answers)).toBeGreaterThan(0);
    for (const a of answers.filter((a) => a.status !== 201)) expect(a.status, JSON.stringify(a.json)).toBe(409);
    expect(new Set(ok.map((a) => a.json.id)).size).toBe(1);
    expect((await api("GET", `/v1/fleets/${fleet}/enrollment-tokens`)).json.items).toHaveLength(1);
    const secrets = [...new Set(ok.map((a) => a.json.token as string))];
    let enrolled = 0;
    for (const [i, secret] of secrets.entries()) {
      const r = await fetch(new URL("/v1/agent/enroll", url), {
        method: "POST",
        headers: { authorization: `Bearer ${secret}`, "content-type": "application/json" },
        body: JSON.stringify({ hostname: `i${i}.${fleet}.example.com`, machine_id: `${fleet}-${i}`, boot_id: "b" }),
      });
      if (r.status === 201) enrolled++;
      else expect(r.status).toBe(401);
    }
    expect(enrolled).toBe(1);
  });

  it("registers one image for eight identical registrations at once: one id, one catalog row", async () => {
    const name = uniq("img");
    const bytes = Buffer.from("probe image bytes");
    const digest = `sha256:${(await import("node:crypto")).createHash("sha256").update(bytes).digest("hex")}`;
    const body = { name, version: "1", kind: "tarball", digest, size: bytes.length };
    const answers = await Promise.all(Array.from({ length: 8 }, () => api("POST", "/v1/images", body)));
    for (const a of answers) expect([200, 201], JSON.stringify(a.json)).toContain(a.status);
    expect(answers.filter((a) => a.status === 201)).toHaveLength(1);
    expect(new Set(answers.map((a) => a.json.id)).size).toBe(1);
    const list = (await api("GET", `/v1/images?name=${name}`)).json.items as any[];
    expect(list).toHaveLength(1);
  });

  it("keeps a FleetLock slot for one holder when the same host asks for it eight times at once", async () => {
    const fleet = uniq("fl");
    expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
    const base = (await api("POST", `/v1/fleets/${fleet}/fleetlock-key`)).json.base_url as string;
    expect((await api("PUT", `/v1/fleets/${fleet}/reboot-groups/default`, { slots: 1 })).status).toBe(200);
    for (const id of ["a", "b"]) {
      const r = await api("POST", "/v1/servers", {
        fleet,
        hostname: `${id}.${fleet}.example.com`,
        kind: "managed",
        fleetlock_id: `${fleet}-${id}`,
      });
      expect(r.status).toBe(201);
    }
    const zincati = (op: string, id: string) =>
      fetch(new URL(`v1/${op}`, base), {
        method: "POST",
        headers: { "fleet-lock-protocol": "true" },
        body: JSON.stringify({ client_params: { id, group: "default" } }),
      }).then(async (r) => ({ status: r.status, json: (await r.json()) as any }));
    const answers = await Promise.all(Array.from({ length: 8 }, () => zincati("pre-reboot", `${fleet}-a`)));
    expect(answers.map((a) => a.status)).toEqual(Array(8).fill(200));
    const group = (await api("GET", `/v1/fleets/${fleet}/reboot-groups/default`)).json;
    expect(group.holders.map((h: any) => h.id)).toEqual([`${fleet}-a`]);
    const audit = (await api("GET", `/v1/audit?target=fleet:${fleet}&limit=100`)).json.items as any[];
    expect(
      audit.filter((e) => e.action === "fleetlock.acquire" || e.action === "fleetlock.grant").length,
    ).toBeLessThanOrEqual(1);
    // Released as many times at once: the slot is free once, b gets it.
    const released = await Promise.all(Array.from({ length: 8 }, () => zincati("steady-state", `${fleet}-a`)));
    expect(released.map((a) => a.status)).toEqual(Array(8).fill(200));
    expect((await zincati("pre-reboot", `${fleet}-b`)).status).toBe(200);
  });

  it("a decommission racing the host's reports and an operator's refresh ends with the server decommissioned or pending, never a 500", async () => {
    const fleet = uniq("dec");
    expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
    const s = (await api("POST", "/v1/servers", { fleet, hostname: `${fleet}.example.com`, kind: "managed" })).json;
    expect((await api("PUT", `/v1/servers/${s.id}/desired`, { generation: 2, agents: [] })).status).toBe(200);
    const report = () =>
      fetch(new URL("/v1/agent/inventory", url), {
        method: "PUT",
        headers: { authorization: `Bearer ${s.token}`, "content-type": "application/json" },
        body: JSON.stringify({
          generation: 2,
          reconciled_at: new Date().toISOString(),
          boot_id: "b",
          agents: [],
          errors: [],
          assignments: { units: [], storage: [] },
        }),
      }).then(async (r) => ({ status: r.status, json: (await r.json()) as any }));
    const all = await Promise.all([
      ...Array.from({ length: 4 }, report),
      api("POST", `/v1/servers/${s.id}/decommission`),
      api("POST", `/v1/servers/${s.id}/decommission`),
      api("POST", `/v1/servers/${s.id}/refresh`),
      ...Array.from({ length: 4 }, report),
    ]);
    for (const a of all) expect(a.status, JSON.stringify(a.json)).toBeLessThan(500);
    const decs = all.slice(4, 6);
    expect(
      decs.some((d) => d.status === 200),
      JSON.stringify(decs),
    ).toBe(true);
    const got = (await api("GET", `/v1/servers/${s.id}`)).json;
    expect(got.lifecycle?.order, JSON.stringify(got)).toBe("terminate");
    const audit = (await api("GET", `/v1/audit?target=server:${s.id}&limit=100`)).json.items as any[];
    expect(
      audit.filter((e) => e.action === "server.decommission").length,
      JSON.stringify(audit.map((e) => e.action)),
    ).toBe(1);
  });

  it("an operator token revoked while it writes: every write answered 200 is audited, none after, and then 401", async () => {
    const fleet = uniq("rev");
    expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
    const s = (await api("POST", "/v1/servers", { fleet, hostname: `${fleet}.example.com`, kind: "managed" })).json;
    const t = (await api("POST", "/v1/tokens", { name: uniq("rev"), scope: "admin" })).json;
    const put = (generation: number) =>
      fetch(new URL(`/v1/servers/${s.id}/desired`, url), {
        method: "PUT",
        headers: { authorization: `Bearer ${t.token}`, "content-type": "application/json" },
        body: JSON.stringify({ generation, agents: [] }),
      }).then(async (r) => ({ status: r.status, json: (await r.json()) as any, generation }));
    const [writes, revoked] = await Promise.all([
      Promise.all(Array.from({ length: 10 }, (_, i) => sleep(i * 15).then(() => put(i + 2)))),
      sleep(40).then(() => api("DELETE", `/v1/tokens/${t.id}`)),
    ]);
    expect(revoked.status).toBe(200);
    for (const w of writes) expect([200, 401, 409], JSON.stringify(w.json)).toContain(w.status);
    expect((await put(100)).status).toBe(401);
    // Audit rows leave through the ledger's outbox: give them a moment.
    const accepted = writes
      .filter((w) => w.status === 200)
      .map((w) => w.generation)
      .sort((a, b) => a - b);
    let audited: number[] = [];
    for (let i = 0; i < 50; i++) {
      const items = (await api("GET", `/v1/audit?target=server:${s.id}&limit=100`)).json.items as any[];
      audited = items
        .filter((e) => e.action === "server.desired.put" && e.actor === `token:${t.id}`)
        .map((e) => e.details?.generation)
        .sort((a, b) => a - b);
      if (audited.length >= accepted.length) break;
      await sleep(100);
    }
    expect(audited).toEqual(accepted);
  });

  it("an image completed, uploaded and deleted at once ends whole or gone: never half, never a 500", async () => {
    const { createHash } = await import("node:crypto");
    const MiB = 1024 * 1024;
    const bytes = Buffer.alloc(5 * MiB + 1000, 7);
    const digest = `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
    const reg = await api("POST", "/v1/images", {
      name: uniq("race-img"),
      version: "1",
      kind: "tarball",
      digest,
      size: bytes.length,
      part_size: 5 * MiB,
    });
    expect(reg.status, JSON.stringify(reg.json)).toBe(201);
    const id = reg.json.id as string;
    const part = (n: number, b: Buffer) =>
      fetch(new URL(`/v1/images/${id}/parts/${n}`, url), {
        method: "PUT",
        headers: { authorization: `Bearer ${admin}`, "content-type": "application/octet-stream" },
        body: b,
      }).then(async (r) => ({ what: `part ${n}`, status: r.status, json: (await r.json()) as any }));
    expect((await part(1, bytes.subarray(0, 5 * MiB))).status).toBe(200);
    const all = await Promise.all([
      part(2, bytes.subarray(5 * MiB)),
      api("POST", `/v1/images/${id}/complete`).then((a) => ({ what: "complete", ...a })),
      sleep(30).then(() => api("POST", `/v1/images/${id}/complete`).then((a) => ({ what: "complete", ...a }))),
      part(2, bytes.subarray(5 * MiB)),
      sleep(60).then(() => api("POST", `/v1/images/${id}/complete`).then((a) => ({ what: "complete", ...a }))),
    ]);
    for (const a of all) expect(a.status, `${a.what}: ${JSON.stringify(a.json)}`).toBeLessThan(500);
    // Complete once more, now that both parts surely are in: it must be ready, and read back whole.
    const done = await api("POST", `/v1/images/${id}/complete`);
    expect(done.status, JSON.stringify(done.json)).toBe(200);
    const got = (await api("GET", `/v1/images/${id}`)).json;
    expect([got.state, got.size, got.digest]).toEqual(["ready", bytes.length, digest]);
    const blob = await fetch(new URL(`/v1/agent/images/${id}/blob`, url), {
      headers: { authorization: `Bearer ${await hostToken(reg.json)}` },
    });
    expect(blob.status).toBe(200);
    const read = Buffer.from(await blob.arrayBuffer());
    expect(`sha256:${createHash("sha256").update(read).digest("hex")}`).toBe(digest);

    // Deleted while a part and a completion race it: gone, and nothing answers for it after.
    const reg2 = await api("POST", "/v1/images", {
      name: uniq("race-del"),
      version: "1",
      kind: "tarball",
      digest,
      size: bytes.length,
      part_size: 5 * MiB,
    });
    const id2 = reg2.json.id as string;
    const racing = await Promise.all([
      fetch(new URL(`/v1/images/${id2}/parts/1`, url), {
        method: "PUT",
        headers: { authorization: `Bearer ${admin}`, "content-type": "application/octet-stream" },
        body: bytes.subarray(0, 5 * MiB),
      }).then((r) => ({ what: "part", status: r.status })),
      sleep(20).then(() => api("DELETE", `/v1/images/${id2}`).then((a) => ({ what: "delete", status: a.status }))),
      sleep(40).then(() =>
        api("POST", `/v1/images/${id2}/complete`).then((a) => ({ what: "complete", status: a.status })),
      ),
    ]);
    for (const a of racing) expect(a.status, a.what).toBeLessThan(500);
    if (racing[1]!.status === 200) expect((await api("GET", `/v1/images/${id2}`)).status).toBe(404);
  });

  it("two operators applying different specs with prune at once leave one of them whole, never a mix of both", async () => {
    const fleet = uniq("mix");
    expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
    const spec = (await api("GET", `/v1/fleets/${fleet}/spec`)).json;
    const variant = (n: number) => ({
      ...spec,
      settings: { ...spec.settings, stale_after_s: 600 + n },
      capabilities: { [`cap${n}`]: true },
      channels: Object.fromEntries(
        [1, 2, 3].map((i) => [`agent${n}-${i}`, { image: `reg/a${n}:${i}`, version: String(i) }]),
      ),
      roles: { [`role${n}`]: { agents: [{ name: `agent${n}-1` }] } },
    });
    for (let round = 0; round < 3; round++) {
      const answers = await Promise.all(
        [1, 2].map((n) => api("PUT", `/v1/fleets/${fleet}/spec?prune=true`, variant(n + round * 2))),
      );
      for (const a of answers) expect([200, 409], JSON.stringify(a.json)).toContain(a.status);
      const now = (await api("GET", `/v1/fleets/${fleet}/spec`)).json;
      const n = now.settings.stale_after_s - 600;
      expect([1, 2].map((k) => k + round * 2)).toContain(n);
      const want = variant(n);
      expect([now.capabilities, Object.keys(now.channels).sort(), Object.keys(now.roles)]).toEqual([
        want.capabilities,
        Object.keys(want.channels).sort(),
        Object.keys(want.roles),
      ]);
    }
  });

  it("a decommission racing the same machine's enrollment leaves one server for it, and no 500", async () => {
    const fleet = uniq("denr");
    expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
    const t = await api("POST", `/v1/fleets/${fleet}/enrollment-tokens`, {
      name: "race",
      expires_at: new Date(Date.now() + 3_600_000).toISOString(),
    });
    const enroll = () =>
      fetch(new URL("/v1/agent/enroll", url), {
        method: "POST",
        headers: { authorization: `Bearer ${t.json.token}`, "content-type": "application/json" },
        body: JSON.stringify({ hostname: `m.${fleet}.example.com`, machine_id: `${fleet}-m`, boot_id: "b" }),
      }).then(async (r) => ({ status: r.status, json: (await r.json()) as any }));
    const first = await enroll();
    expect(first.status, JSON.stringify(first.json)).toBe(201);
    const id = first.json.server?.id ?? first.json.id;
    const all = await Promise.all([
      api("POST", `/v1/servers/${id}/decommission`),
      enroll(),
      enroll(),
      sleep(20).then(enroll),
    ]);
    for (const a of all) expect(a.status, JSON.stringify(a.json)).toBeLessThan(500);
    const servers = (await api("GET", `/v1/servers?fleet=${fleet}`)).json.items as any[];
    expect(servers.map((x) => x.id)).toEqual([id]);
  });

  it("grants a two-slot group to two of eight hosts asking at once, and to no third while a resize races them", async () => {
    const fleet = uniq("slots");
    expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
    const base = (await api("POST", `/v1/fleets/${fleet}/fleetlock-key`)).json.base_url as string;
    expect((await api("PUT", `/v1/fleets/${fleet}/reboot-groups/default`, { slots: 2, queue_wait_s: 0 })).status).toBe(
      200,
    );
    const ids = Array.from({ length: 8 }, (_, i) => `${fleet}-${i}`);
    for (const id of ids) {
      const r = await api("POST", "/v1/servers", {
        fleet,
        hostname: `${id}.example.com`,
        kind: "managed",
        fleetlock_id: id,
      });
      expect(r.status).toBe(201);
    }
    const zincati = (id: string) =>
      fetch(new URL("v1/pre-reboot", base), {
        method: "POST",
        headers: { "fleet-lock-protocol": "true" },
        body: JSON.stringify({ client_params: { id, group: "default" } }),
      }).then(async (r) => ({ id, status: r.status, json: (await r.json()) as any }));
    const [answers] = await Promise.all([
      Promise.all(ids.map(zincati)),
      sleep(10).then(() => api("PUT", `/v1/fleets/${fleet}/reboot-groups/default`, { slots: 1, queue_wait_s: 0 })),
    ]);
    const granted = answers.filter((a) => a.status === 200).map((a) => a.id);
    for (const a of answers) expect([200, 409], JSON.stringify(a.json)).toContain(a.status);
    expect(granted.length).toBeGreaterThanOrEqual(1);
    expect(granted.length).toBeLessThanOrEqual(2);
    const group = (await api("GET", `/v1/fleets/${fleet}/reboot-groups/default`)).json;
    expect(group.holders.map((h: any) => h.id).sort()).toEqual([...granted].sort());
  });

  it("keeps one channel socket per server when twenty connect at once: the others are told 4001, only one hears a change", async () => {
    const fleet = uniq("sockets");
    expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
    const s = (await api("POST", "/v1/servers", { fleet, hostname: `${fleet}.example.com`, kind: "managed" })).json;
    const wsUrl = new URL("/v1/agent/channel", url.href.replace(/^http/, "ws"));
    const sockets = Array.from({ length: 20 }, () => {
      const ws = new WebSocket(wsUrl, ["harbormaster.v1", `hm-token.${s.token}`]);
      const got: any[] = [];
      ws.addEventListener("message", (e) => got.push(JSON.parse(String(e.data))));
      ws.addEventListener("error", () => {});
      return { ws, got };
    });
    // A replaced socket receives the close frame (4001) and answers it, so it leaves OPEN; wrangler
    // dev does not then end the connection, so a WHATWG client stays CLOSING rather than closed.
    const deadline = Date.now() + 10_000;
    const open = () => sockets.filter((x) => x.ws.readyState === WebSocket.OPEN);
    while (
      Date.now() < deadline &&
      (open().length !== 1 || sockets.some((x) => x.ws.readyState === WebSocket.CONNECTING))
    )
      await sleep(100);
    expect(open()).toHaveLength(1);
    const before = sockets.map((x) => x.got.length);
    expect((await api("PUT", `/v1/servers/${s.id}/desired`, { generation: 5, agents: [] })).status).toBe(200);
    const until = Date.now() + 5_000;
    while (Date.now() < until && !open()[0]!.got.some((m) => JSON.stringify(m).includes('"generation":5')))
      await sleep(50);
    expect(JSON.stringify(open()[0]!.got)).toContain('"generation":5');
    await sleep(300);
    // The change went to the one socket the ledger keeps, and to none of the replaced ones.
    const heard = sockets.filter((x, i) => x.got.length > before[i]!);
    expect(heard).toHaveLength(1);
    for (const x of sockets) x.ws.close();
  });
});
