import type { Command } from "commander";
import type { Api, Fleet, RebootGroup, ServerSummary } from "../api.ts";
import { ApiError } from "../api.ts";
import { Exit, type Io } from "../io.ts";
import { act } from "../context.ts";

export interface FleetStatus {
  id: string;
  servers: { total: number; by_status: Record<string, number>; by_state: Record<string, number> };
  /** Servers that need a look: failed, stale or drifted (at most 20 each). */
  attention: { id: string; hostname: string; status: string; last_seen: string | null }[];
  reboot_groups: { name: string; slots: number; held: number; paused: boolean; open_now: boolean; holders: { id: string; hostname: string | null; since: string; stuck: boolean }[] }[];
}

const ATTENTION = ["failed", "stale", "drifted"];

async function fleetStatus(api: Api, fleet: Fleet): Promise<FleetStatus> {
  const [servers, groups] = await Promise.all([
    api.listServers({ fleet: fleet.id }),
    api.listGroups(fleet.id).catch((err) => {
      if (err instanceof ApiError && err.status === 404) return { items: [] as RebootGroup[] };
      throw err;
    }),
  ]);
  const count = (key: (s: ServerSummary) => string) =>
    servers.reduce<Record<string, number>>((acc, s) => ((acc[key(s)] = (acc[key(s)] ?? 0) + 1), acc), {});
  return {
    id: fleet.id,
    servers: { total: servers.length, by_status: count((s) => s.status), by_state: count((s) => s.state) },
    attention: ATTENTION.flatMap((st) =>
      servers
        .filter((s) => s.status === st)
        .slice(0, 20)
        .map((s) => ({ id: s.id, hostname: s.hostname, status: s.status, last_seen: s.last_seen })),
    ),
    reboot_groups: groups.items.map((g) => ({
      name: g.name,
      slots: g.slots,
      held: g.holders.length,
      paused: g.paused,
      open_now: g.open_now,
      holders: g.holders.map((h) => ({ id: h.id, hostname: h.server?.hostname ?? null, since: h.granted_at, stuck: h.stuck })),
    })),
  };
}

export function registerStatus(program: Command, io: Io) {
  program
    .command("status")
    .description("one screen: servers by status and state, those needing a look, reboot groups and holders, data version")
    .option("--fleet <fleet>", "only this fleet")
    .option("--check", "exit 3 when any server is failed, stale or drifted")
    .action(
      act(io, async (ctx, o: { fleet?: string; check?: boolean }) => {
        const api = ctx.api;
        const [fleets, upgrades] = await Promise.all([
          o.fleet ? api.getFleet(o.fleet).then((f) => [f]) : api.listFleets(),
          api.upgrades({ limit: 1 }),
        ]);
        const status = {
          url: ctx.connection.url,
          data: { state: upgrades.state, data_version: upgrades.data_version, newest_version: upgrades.newest_version },
          fleets: await Promise.all(fleets.map((f) => fleetStatus(api, f))),
          // Rollouts arrive with their own issue; the field is here so scripts can rely on it.
          rollouts: [] as unknown[],
        };
        const found = status.fleets.reduce((n, f) => n + f.attention.length, 0);
        if (ctx.globals.json) ctx.out.data(status);
        else {
          const out = ctx.out;
          const c = out.c;
          out.line(`${c.bold("Harbormaster")} ${status.url}  data ${status.data.data_version}/${status.data.newest_version} ${status.data.state === "current" ? c.green("current") : c.yellow(status.data.state)}`);
          if (!status.fleets.length) out.line(c.dim("(no fleets)"));
          for (const f of status.fleets) {
            out.line();
            const by = Object.entries(f.servers.by_status).sort().map(([k, v]) => `${out.status(k)} ${v}`).join("  ");
            const states = Object.entries(f.servers.by_state).sort().map(([k, v]) => `${k} ${v}`).join("  ");
            out.line(`${c.bold(`Fleet ${f.id}`)}  ${f.servers.total} servers   ${by || "-"}`);
            if (states) out.line(`  state   ${states}`);
            for (const s of f.attention) out.line(`  ${out.status(s.status).padEnd(8)} ${s.hostname}  ${c.dim(s.id)}  last seen ${s.last_seen ?? "never"}`);
            for (const g of f.reboot_groups) {
              const flags = [g.paused ? c.yellow("paused") : "", g.open_now ? "" : c.yellow("closed")].filter(Boolean).join(" ");
              const holders = g.holders.map((h) => `${h.hostname ?? h.id}${h.stuck ? c.red(" (stuck)") : ""}`).join(", ");
              out.line(`  reboot group ${g.name}: ${g.held}/${g.slots} held ${flags}${holders ? `  ${holders}` : ""}`);
            }
          }
          out.line();
          out.line(c.dim("rollouts: none (not available yet)"));
        }
        if (o.check && found > 0) throw new Exit(3, `${found} server(s) need a look`);
      }),
    );
}
