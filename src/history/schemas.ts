import { z } from "@hono/zod-openapi";
import { agentName } from "../model/server/schemas";
import { SERVER_STATUSES } from "../domain/enums";
import { RETENTION_MS } from "./rollup";

export const HISTORY_METRICS = ["servers", "versions", "reboots", "rollouts"] as const;
export type HistoryMetric = (typeof HISTORY_METRICS)[number];

const DURATION = /^([1-9][0-9]{0,5})([mhd])$/;
const UNIT_MS = { m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
const ISO_TIME = /^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d{1,3})?)?(Z|[+-]\d{2}:\d{2}))?$/;

/** `since` as a time: a duration back from `now` (`90m`, `24h`, `7d`) or an ISO 8601 time; null if neither. */
export function sinceOf(value: string, now: number): number | null {
  const d = DURATION.exec(value);
  if (d) return now - Number(d[1]) * UNIT_MS[d[2] as keyof typeof UNIT_MS];
  if (!ISO_TIME.test(value)) return null;
  const t = Date.parse(value);
  return Number.isFinite(t) ? t : null;
}

const RETENTION_DAYS = RETENTION_MS / 86_400_000;

export const HistoryQuery = z.object({
  metric: z
    .string()
    .max(100)
    .optional()
    .refine((v) => v === undefined || v.split(",").every((m) => (HISTORY_METRICS as readonly string[]).includes(m)), {
      message: `a comma-separated list of ${HISTORY_METRICS.join(", ")}`,
    })
    .openapi({
      description: `Which figures, comma-separated: ${HISTORY_METRICS.join(", ")} (default: all)`,
      example: "servers,versions",
    }),
  since: z
    .string()
    .max(40)
    .optional()
    .refine((v) => v === undefined || sinceOf(v, Date.now()) !== null, {
      message: "a duration (90m, 24h, 7d) or an ISO 8601 time",
    })
    .refine((v) => v === undefined || sinceOf(v, Date.now())! >= Date.now() - RETENTION_MS - 60_000, {
      message: `history is kept ${RETENTION_DAYS} days: since may go back ${RETENTION_DAYS}d at most`,
    })
    .refine((v) => v === undefined || sinceOf(v, Date.now())! <= Date.now(), { message: "since is in the future" })
    .openapi({
      description: `Start of the window: 90m, 24h, 7d or an ISO time (default 24h, at most ${RETENTION_DAYS}d)`,
    }),
  agent: agentName.optional().openapi({ description: "Only this agent's versions" }),
  format: z.enum(["json", "csv"]).optional().openapi({ description: "csv: as `Accept: text/csv`" }),
});

const Iso = z.string().openapi({ example: "2026-11-26T10:05:00.000Z" });

const ServersPoint = z.object({
  at: Iso,
  total: z.number().int(),
  by_status: z.record(z.enum(SERVER_STATUSES), z.number().int()),
});

const VersionsPoint = z.object({
  at: Iso,
  total: z.number().int().openapi({ description: "servers that should run the agent" }),
  versions: z.record(z.string(), z.number().int()).openapi({ description: "reported version → servers" }),
  not_reported: z.number().int(),
  other: z.number().int().openapi({ description: "servers on versions past the 8 most common (folded)" }),
});

const TimeTo95StateSchema = z.enum(["measured", "before_window", "not_reached"]);
export type TimeTo95State = z.infer<typeof TimeTo95StateSchema>;

const VersionSpread = z.object({
  version: z.string(),
  servers: z.number().int().openapi({ description: "servers reporting it at the end of the window" }),
  share: z.number().openapi({ description: "of the agent's servers, 0..1, at the end of the window" }),
  peak_share: z.number(),
  first_seen_at: Iso.nullable().openapi({ description: "null: already there when the window opened" }),
  reached_95_at: Iso.nullable().openapi({ description: "first time 95 % of the agent's servers reported it" }),
  time_to_95_s: z
    .number()
    .int()
    .nullable()
    .openapi({ description: "from first seen to 95 %; null if either falls outside the window" }),
  time_to_95_state: TimeTo95StateSchema.openapi({
    description:
      "measured: time_to_95_s is the figure; before_window: the version was already spreading when the " +
      "window opened, so its start is unknown; not_reached: it has not reached 95 %",
  }),
});

const AgentHistory = z.object({
  agent: z.string(),
  points: z.array(VersionsPoint),
  spread: z.array(VersionSpread),
});

const DayCount = z.object({ day: z.string().openapi({ example: "2026-11-26" }), count: z.number().int() });

export const FleetHistory = z
  .object({
    fleet: z.string(),
    since: Iso,
    until: Iso,
    period_s: z.number().int().openapi({ description: "rollup period; a row is written only when a figure changed" }),
    retention_days: z.number().int(),
    metrics: z.array(z.enum(HISTORY_METRICS)),
    servers: z
      .array(ServersPoint)
      .optional()
      .openapi({ description: "servers by status at each change; the first point is the state at `since`" }),
    versions: z.array(AgentHistory).optional(),
    reboots: z.array(DayCount).optional().openapi({ description: "FleetLock reboot grants per UTC day" }),
    rollouts: z.array(DayCount).optional().openapi({ description: "rollouts started per UTC day" }),
  })
  .openapi("FleetHistory");
export type FleetHistory = z.infer<typeof FleetHistory>;
