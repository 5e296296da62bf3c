#!/usr/bin/env node
/**
 * `npm run sim:canary`: progressive delivery, end to end, against a running Harbormaster. A fleet
 * of servers in zones (100 in 4 by default) runs fw-agent 1.0.0; a rollout of 2.0.0 goes canary 2
 * → analysis (its servers realized and healthy, and a Prometheus query against a small
 * Prometheus-compatible endpoint served here on 127.0.0.1) → waves of 10 %, 50 %, 100 % zone by
 * zone, with auto_rollback. The new image fails on a tenth of the hosts, one of the canary among
 * them: the analysis fails, the rollout rolls back by itself, and no server outside the canary is
 * written. The hosts are stand-ins that reconcile whatever they are given at once.
 */
import { createServer, type Server } from "node:http";
import { fileURLToPath } from "node:url";
import type { AddressInfo } from "node:net";
import { resolveConnection } from "../cli/config.ts";

const AGENT = "fw-agent";
const OLD = { image: "registry.example/fw:1.0.0", version: "1.0.0" };
const NEW = { image: "registry.example/fw:2.0.0", version: "2.0.0" };

export interface CanaryOptions {
  url: string;
  token: string;
  servers?: number;
  zones?: number;
  /** One host in this many fails the new image (the second host in name order is one of them). */
  failEvery?: number;
  /** The Prometheus endpoint's error ratio (the check holds below 0.05). */
  errorRatio?: number;
  timeoutS?: number;
  log?: (line: string) => void;
}

export interface CanaryResult {
  fleet: string;
  rollout: string;
  state: string;
  reason: string | null;
  canary: string[];
  failing: string[];
  /** Servers outside the canary whose desired config changed: none, if the rollout held. */
  writtenOutsideCanary: string[];
  analysis: { name: string; ok: boolean; value: number | null; threshold: number | null; detail: string }[];
  prometheusCalls: number;
  events: string[];
  tookMs: number;
}

interface Host {
  id: string;
  token: string;
  hostname: string;
  zone: string;
}

/** A Prometheus-compatible `/api/v1/query` answering one vector sample, counting its calls. */
export function prometheusStub(errorRatio: number): Promise<{ url: string; calls: () => number; close(): void }> {
  let calls = 0;
  const server: Server = createServer((req, res) => {
    const u = new URL(req.url ?? "/", "http://x");
    if (u.pathname !== "/api/v1/query" || !u.searchParams.get("query")) {
      res.writeHead(400, { "content-type": "application/json" });
      res.end(JSON.stringify({ status: "error", errorType: "bad_data", error: "no query" }));
      return;
    }
    calls++;
    res.writeHead(200, { "content-type": "application/json" });
    res.end(
      JSON.stringify({
        status: "success",
        data: { resultType: "vector", result: [{ metric: {}, value: [Date.now() / 1000, String(errorRatio)] }] },
      }),
    );
  });
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo;
      resolve({ url: `http://127.0.0.1:${port}`, calls: () => calls, close: () => server.close() });
    }),
  );
}

export async function runCanaryScenario(o: CanaryOptions): Promise<CanaryResult> {
  const started = Date.now();
  const log = o.log ?? (() => {});
  const n = o.servers ?? 100;
  const zones = o.zones ?? 4;
  const failEvery = o.failEvery ?? 10;
  const api = async (method: string, path: string, body?: unknown, token = o.token) => {
    const res = await fetch(`${o.url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const json = (await res.json().catch(() => null)) as any;
    if (res.status >= 400) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
    return json;
  };
  const inBatches = async <T, R>(items: T[], size: number, fn: (x: T, i: number) => Promise<R>) => {
    const out: R[] = [];
    for (let i = 0; i < items.length; i += size)
      out.push(...(await Promise.all(items.slice(i, i + size).map((x, j) => fn(x, i + j)))));
    return out;
  };

  const fleet = `canary-${Date.now().toString(36)}`;
  await api("POST", "/v1/fleets", { id: fleet });
  await api("PUT", `/v1/fleets/${fleet}/channels/${AGENT}`, OLD);
  await api("PUT", `/v1/fleets/${fleet}/roles/edge`, { agents: [{ name: AGENT }] });
  log(`fleet ${fleet}: registering ${n} servers in ${zones} zones`);
  const hosts: Host[] = await inBatches(
    Array.from({ length: n }, (_, i) => i),
    10,
    async (i) => {
      const zone = `zone-${String.fromCharCode(97 + (i % zones))}`;
      const hostname = `${fleet}-${String(i).padStart(3, "0")}.example.com`;
      const s = await api("POST", "/v1/servers", {
        fleet,
        hostname,
        kind: "managed",
        roles: ["edge"],
        labels: { zone },
      });
      return { id: s.id, token: s.token, hostname, zone };
    },
  );
  const failing = new Set(hosts.filter((_, i) => i % failEvery === 1).map((h) => h.id));
  /** A host reconciles what it is given; a failing host cannot run the new image. */
  const reconcile = async (h: Host) => {
    const cfg = await api("GET", "/v1/agent/desired", undefined, h.token);
    const fails = failing.has(h.id) && cfg.agents.some((a: any) => a.name === AGENT && a.image === NEW.image);
    await api(
      "PUT",
      "/v1/agent/inventory",
      {
        generation: cfg.generation,
        reconciled_at: new Date().toISOString(),
        boot_id: "boot-1",
        agents: cfg.agents
          .filter((a: any) => !(fails && a.name === AGENT))
          .map((a: any) => ({ ...a, state: "running" })),
        errors: fails ? [{ agent: AGENT, op: "update", message: "image crashes on start" }] : [],
        assignments: { units: [], storage: [] },
      },
      h.token,
    );
  };
  await inBatches(hosts, 10, reconcile);
  const before = new Map<string, number>();
  await inBatches(hosts, 10, async (h) =>
    before.set(h.id, (await api("GET", `/v1/servers/${h.id}`)).desired.generation),
  );

  const prom = await prometheusStub(o.errorRatio ?? 0.01);
  try {
    const rollout = await api("POST", "/v1/rollouts", {
      fleet,
      agent: AGENT,
      ...NEW,
      concurrency: 10,
      strategy: {
        auto_rollback: true,
        steps: [
          { type: "canary", count: 2 },
          {
            type: "analysis",
            bake_s: 30,
            interval_s: 5,
            checks: [
              { kind: "realized" },
              {
                kind: "prometheus",
                endpoint: prom.url,
                query: 'sum(rate(http_errors_total{job="fw"}[5m])) / sum(rate(http_requests_total{job="fw"}[5m]))',
                comparison: "<",
                threshold: 0.05,
              },
            ],
          },
          { type: "wave", percent: 10, by: "zone" },
          { type: "wave", percent: 50, by: "zone" },
          { type: "wave", percent: 100, by: "zone" },
        ],
      },
    });
    const id = rollout.id as string;
    const canary = (rollout.steps[0].servers as string[]).slice();
    log(`rollout ${id}: ${rollout.steps.length} phases; canary ${canary.join(", ")}`);
    const byHostname = new Map(hosts.map((h) => [h.hostname, h]));
    const deadline = Date.now() + (o.timeoutS ?? 120) * 1000;
    let r = rollout;
    while (!["rolled_back", "succeeded", "cancelled"].includes(r.state) && Date.now() < deadline) {
      const applying = (await api("GET", `/v1/rollouts/${id}/targets?state=applying`)).items as { hostname: string }[];
      await Promise.all(applying.map((t) => reconcile(byHostname.get(t.hostname)!)));
      r = await api("GET", `/v1/rollouts/${id}?wait=2&since=${r.change}`);
      log(
        `${r.state} phase ${r.current_phase} ${JSON.stringify(r.counts)}${r.blocked_by.length ? ` — ${r.blocked_by[0].message}` : ""}`,
      );
    }
    const canaryIds = new Set(canary.map((h) => byHostname.get(h)!.id));
    const written: string[] = [];
    await inBatches(hosts, 10, async (h) => {
      if (canaryIds.has(h.id)) return;
      const s = await api("GET", `/v1/servers/${h.id}`);
      if (s.desired.generation !== before.get(h.id)) written.push(h.hostname);
    });
    const events = (await api("GET", `/v1/rollouts/${id}/events?limit=200`)).items.map((e: any) => e.kind);
    return {
      fleet,
      rollout: id,
      state: r.state,
      reason: r.reason,
      canary,
      failing: hosts.filter((h) => failing.has(h.id)).map((h) => h.hostname),
      writtenOutsideCanary: written,
      analysis: r.analysis,
      prometheusCalls: prom.calls(),
      events,
      tookMs: Date.now() - started,
    };
  } finally {
    prom.close();
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const conn = resolveConnection({});
  const result = await runCanaryScenario({ url: conn.url, token: conn.token, log: (l) => console.error(l) });
  console.log(JSON.stringify(result, null, 2));
  const ok = result.state === "rolled_back" && result.writtenOutsideCanary.length === 0;
  console.error(
    ok
      ? `ok: the canary's analysis failed and the rollout rolled back by itself; no server outside the canary was written (${result.tookMs} ms)`
      : `unexpected: ${result.state}, ${result.writtenOutsideCanary.length} server(s) outside the canary written`,
  );
  process.exit(ok ? 0 : 1);
}
