/** How rollouts, their targets and events are answered over HTTP (ids and times as the API shows them). */
import type { rollouts } from "../db/schema";
import { iso, isoOrNull } from "../lib/time";
import type { RolloutSummary } from "./views";
import type { Target } from "./machine";
import type { BlockedBy } from "../model/blocked-by";

/** Token actors' names (`token:<id>` → name), so a rollout says who started it by name. */
export type ActorNames = ReadonlyMap<string, string>;

export const view = (s: RolloutSummary, names: ActorNames) => {
  const { version_seq, created_at, ended_at, warnings, steps, analysis, ...rest } = s;
  return {
    ...rest,
    created_by_name: names.get(s.created_by) ?? null,
    steps: steps.map((st) => ({ ...st, started_at: isoOrNull(st.started_at), until: isoOrNull(st.until) })),
    analysis: analysis.map((a) => ({ ...a, at: iso(a.at) })),
    warnings: warnings.map((w) => ({ ...w, at: iso(w.at) })),
    created_at: iso(created_at),
    ended_at: isoOrNull(ended_at),
    change: version_seq,
  };
};

export const targetView = (t: Target & { duration_ms: number | null; blocked_by?: BlockedBy[] }) => ({
  server_id: t.server_id,
  hostname: t.hostname,
  reboot_group: t.reboot_group,
  pass: t.pass,
  state: t.state,
  image: t.image,
  version: t.version,
  from_image: t.from_image,
  from_version: t.from_version,
  generation: t.generation,
  reboot_slot: t.slot,
  started_at: isoOrNull(t.started_at),
  ended_at: isoOrNull(t.ended_at),
  duration_s: t.duration_ms === null ? null : t.duration_ms / 1000,
  reason: t.reason,
  slow: t.warned,
  via_channel: t.via_channel === true,
  blocked_by: t.blocked_by ?? [],
});

export const eventView = (e: {
  id: number;
  at: number;
  kind: string;
  server_id: string | null;
  hostname: string | null;
  details: string | null;
}) => ({
  id: e.id,
  at: iso(e.at),
  kind: e.kind,
  server_id: e.server_id,
  hostname: e.hostname,
  details: e.details ? (JSON.parse(e.details) as unknown) : null,
});

export const listItem = (r: typeof rollouts.$inferSelect, names: ActorNames) => ({
  id: r.id,
  fleet: r.fleetId,
  agent: r.agent,
  image: r.image,
  version: r.version,
  state: r.state,
  pass: r.pass,
  counts: r.counts,
  reason: r.reason,
  created_by: r.createdBy,
  created_by_name: names.get(r.createdBy) ?? null,
  created_at: iso(r.createdAt),
  updated_at: iso(r.updatedAt),
  ended_at: isoOrNull(r.endedAt),
});
