import { call, createFleet, registerServer } from "./helpers";

export const WINDOW = { days: ["Sat"], start_time: "23:00", length_minutes: 120, time_zone: "Europe/Berlin" };

/** A fleet set up through the API: two channels, two roles, a capability, two reboot groups, servers. */
export async function fleetWithIntent(opts: { servers?: number } = {}) {
  const { id: fleet } = await createFleet({ capabilities: { firewall: true }, stale_after_s: 300 });
  const put = async (path: string, body: unknown) => {
    const res = await call("PUT", `/v1/fleets/${fleet}${path}`, { body });
    if (res.status !== 200) throw new Error(`${path}: ${res.status} ${JSON.stringify(res.json)}`);
  };
  await put("/channels/base", { image: "reg/base:1", version: "1" });
  await put("/channels/fw", { image: "reg/fw:1", version: "1" });
  await put("/roles/compute", { agents: [{ name: "base" }] });
  await put("/roles/edge", { agents: [{ name: "base" }, { name: "fw", when: "firewall" }] });
  await put("/reboot-groups/default", { slots: 2 });
  await put("/reboot-groups/night", { slots: 1, windows: [WINDOW], queue_wait_s: 60 });
  const servers = [];
  for (let i = 0; i < (opts.servers ?? 0); i++) {
    servers.push(await registerServer(fleet, { roles: [i % 2 ? "edge" : "compute"], reboot_group: "default" }));
  }
  return { fleet, servers };
}

export async function getSpec(fleet: string) {
  const res = await call("GET", `/v1/fleets/${fleet}/spec`);
  if (res.status !== 200) throw new Error(`spec: ${res.status} ${JSON.stringify(res.json)}`);
  return { spec: res.json, etag: res.headers.get("ETag")! };
}

export const diff = (fleet: string, spec: unknown, prune = false) =>
  call("POST", `/v1/fleets/${fleet}/spec:diff${prune ? "?prune=true" : ""}`, { body: spec });

export const apply = (fleet: string, spec: unknown, opts: { prune?: boolean; ifMatch?: string } = {}) =>
  call("PUT", `/v1/fleets/${fleet}/spec${opts.prune ? "?prune=true" : ""}`, {
    body: spec,
    headers: opts.ifMatch ? { "If-Match": opts.ifMatch } : {},
  });

export const auditOf = async (fleet: string) =>
  (await call("GET", `/v1/audit?target=fleet:${fleet}&limit=100`)).json.items as { action: string; details: any }[];

export const clone = <T>(v: T): T => JSON.parse(JSON.stringify(v));
