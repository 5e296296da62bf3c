/**
 * Why something waits: one reason in the shape every waiter publishes (a queued FleetLock host, a
 * queued or waiting rollout target, a paused reboot group or rollout) and every webhook event and
 * page renders. A waiter carries a list: everything that holds it now, first the one to clear first.
 */
import { z } from "@hono/zod-openapi";

const BLOCKED_BY_KINDS = [
  /** a maintenance window is closed; `until` is when it opens */
  "window",
  /** a gate fails; `since` is when, `detail` its last answer */
  "gate",
  /** the fleet's disruption budget is spent; `servers` hold it */
  "budget",
  /** the reboot group's slots are taken; `servers` hold them */
  "slots",
  /** an operator's hold; `by`, `detail` the reason, `until` its end if any */
  "hold",
  /** an operator paused it (a group or a rollout); `by`, `since` */
  "paused",
  /** the group paused itself (a host not healthy after its reboot, …); `servers`, `since` */
  "auto_paused",
  /** a rollout's analysis: `value` against `threshold` */
  "analysis",
  /** a rollout's pause step: `until` when its bake time ends, none when it waits to be resumed */
  "bake",
  /** earlier hosts in the group's queue go first; `servers` are ahead */
  "queue",
] as const;

const BlockedBySchema = z
  .object({
    kind: z.enum(BLOCKED_BY_KINDS),
    /** one sentence a person reads as it is, naming hosts by hostname */
    message: z.string(),
    since: z.string().datetime().optional(),
    until: z.string().datetime().optional(),
    by: z.string().optional(),
    /** hostnames (not ids) of the servers that hold it, at most 10 */
    servers: z.array(z.string()).max(10).optional(),
    value: z.number().optional(),
    threshold: z.number().optional(),
    detail: z.string().optional(),
  })
  .openapi("BlockedBy");
export type BlockedBy = z.infer<typeof BlockedBySchema>;

export const BlockedByListSchema = z.array(BlockedBySchema);
