/**
 * A fleet in every state the console shows, made through the API and the host building blocks
 * (agent/): servers realized, converging, failed, drifted, never reporting, stale and
 * decommissioning; a reboot group with a held slot and a queued host; a running rollout; drift.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { FleetLockClient } from "../agent/fleetlock.ts";
import { HostApi, type Report } from "../agent/host-api.ts";

export const FLEET = "prod-eu";
export const OLD = "registry.example/web:1.4.0";
export const NEW = "registry.example/web:1.5.0";
export const EXPORTER = "registry.example/node-exporter:1.8.2";

export interface Host {
  id: string;
  hostname: string;
  token: string;
  fleetlockId: string;
}

export interface Seed {
  url: string;
  admin: string;
  readToken: string;
  writeToken: string;
  fleet: string;
  hosts: Record<string, Host>;
  /** The last report of each host that keeps reporting (its heartbeat repeats it). */
  reports: Record<string, Report>;
  rollout: string;
  fleetlockKey: string;
}

export function api(url: string, token: string) {
  return async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${url}${path}`, {
      method,
      headers: {
        Authorization: `Bearer ${token}`,
        ...(body === undefined ? {} : { "Content-Type": "application/json" }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    const json = text ? JSON.parse(text) : null;
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
    return json;
  };
}

export function reportOf(
  generation: number,
  agents: { name: string; image: string }[],
  errors: Report["errors"] = [],
): Report {
  return {
    generation,
    reconciled_at: new Date().toISOString(),
    boot_id: "boot-1",
    agents: agents.map((a) => ({
      name: a.name,
      image: a.image,
      version: a.image.split(":")[1],
      instance_id: `i-${a.name}`,
      state: "running" as const,
    })),
    errors,
    assignments: { units: [], storage: [] },
  } as Report;
}

export const sendReport = (url: string, host: Host, report: Report) =>
  new HostApi(url, host.token).report({ ...report, reconciled_at: new Date().toISOString() });

export async function seed(url: string, admin: string): Promise<Seed> {
  const call = api(url, admin);
  const readToken = (await call("POST", "/v1/tokens", { name: "console-reader", scope: "read" })).token;
  const writeToken = (await call("POST", "/v1/tokens", { name: "console-writer", scope: "write" })).token;
  await call("POST", "/v1/fleets", { id: FLEET, stale_after_s: 10 });
  await call("PUT", `/v1/fleets/${FLEET}/channels/web`, { image: OLD, version: "1.4.0" });
  await call("PUT", `/v1/fleets/${FLEET}/channels/exporter`, { image: EXPORTER, version: "1.8.2" });
  await call("PUT", `/v1/fleets/${FLEET}/roles/web`, { agents: [{ name: "web" }, { name: "exporter" }] });
  await call("PUT", `/v1/fleets/${FLEET}/roles/db`, { agents: [{ name: "exporter" }] });
  await call("PUT", `/v1/fleets/${FLEET}/reboot-groups/night`, { slots: 1, queue_wait_s: 600 });
  const hosts: Record<string, Host> = {};
  const names = ["app-01", "app-02", "app-03", "app-04", "app-05", "app-06", "app-07", "app-08", "db-01"];
  for (const hostname of names) {
    const s = await call("POST", "/v1/servers", {
      fleet: FLEET,
      hostname: `${hostname}.prod-eu.example.com`,
      kind: "managed",
      roles: [hostname.startsWith("db") ? "db" : "web"],
      reboot_group: "night",
      fleetlock_id: `node-${hostname}`,
    });
    hosts[hostname] = { id: s.id, hostname: s.hostname, token: s.token, fleetlockId: `node-${hostname}` };
  }
  const good = reportOf(1, [
    { name: "web", image: OLD },
    { name: "exporter", image: EXPORTER },
  ]);
  const reports: Record<string, Report> = {
    "app-01": good,
    "app-02": good,
    "app-03": good,
    "app-04": reportOf(
      1,
      [{ name: "exporter", image: EXPORTER }],
      [{ agent: "web", op: "install", message: "pull registry.example/web:1.4.0: manifest unknown" }],
    ),
    "app-05": reportOf(1, [
      { name: "web", image: "registry.example/web:1.3.9" },
      { name: "exporter", image: EXPORTER },
    ]),
    "db-01": reportOf(1, [{ name: "exporter", image: EXPORTER }]),
  };
  const heartbeat = () => Promise.all(Object.entries(reports).map(([h, r]) => sendReport(url, hosts[h], r)));
  await heartbeat();
  // app-07 reports once and falls silent: stale once 10 s pass and the cron's tick marks it.
  await sendReport(url, hosts["app-07"], good);
  await call("POST", `/v1/servers/${hosts["app-08"].id}/decommission`, {});

  const key = await call("POST", `/v1/fleets/${FLEET}/fleetlock-key`);
  const lock = (h: string) => new FleetLockClient(key.base_url, { id: hosts[h].fleetlockId, group: "night" });
  const held = await lock("app-03").preReboot();
  if (!held.ok) throw new Error(`app-03 did not get the slot: ${JSON.stringify(held)}`);
  // db-01 parks for the slot; its request goes away, and it keeps its place until its deadline.
  const parked = new AbortController();
  const waiting = lock("db-01")
    .preReboot(parked.signal)
    .catch(() => null);
  await sleep(1500);
  parked.abort();
  await waiting;

  const rollout = await call("POST", "/v1/rollouts", {
    fleet: FLEET,
    agent: "web",
    image: NEW,
    version: "1.5.0",
    concurrency: 1,
    server_timeout_s: 86400,
    exclude: [hosts["app-04"].hostname, hosts["app-05"].hostname],
  });
  for (let i = 0; i < 4; i++) {
    await sleep(3000);
    await heartbeat();
  }
  const tick = await fetch(`${url}/cdn-cgi/handler/scheduled?cron=${encodeURIComponent("* * * * *")}`);
  if (!tick.ok) throw new Error(`scheduled tick: ${tick.status}`);
  await heartbeat();
  return {
    url,
    admin,
    readToken,
    writeToken,
    fleet: FLEET,
    hosts,
    reports,
    rollout: rollout.id,
    fleetlockKey: key.base_url,
  };
}
