/**
 * A reboot group as a fleet spec declares it, built in this one place from the reboot-group
 * settings schema (src/fleetlock/schemas.ts GroupInput): every setting an operator can PUT on a
 * group is a field of the spec's group, except the operational controls below. So a setting
 * added to GroupInput (and to the coordinator's `configure` and group view) is declared, exported,
 * compared and applied by specs with no change here.
 */
import { z } from "@hono/zod-openapi";
import { GroupInput } from "../fleetlock/schemas";
import { UNCLAIMED_GRANT_S } from "../fleetlock/queue";
import { configure, type GroupChange } from "../fleetlock/semaphore";

/** Operators' live controls, not intent: a spec neither sets nor compares them. */
const OPERATIONAL = { paused: true } as const;

const declared = GroupInput.omit(OPERATIONAL);

export const SpecRebootGroup = declared
  .extend({ slots: declared.shape.slots.min(1, "a reboot group in a spec needs at least 1 slot") })
  .openapi("FleetSpecRebootGroup", {
    description: "A reboot group's settings; a field left out takes the value a new group has",
  });
export type SpecRebootGroup = z.infer<typeof SpecRebootGroup>;

/** The fields of a group a spec declares. */
const GROUP_FIELDS = Object.keys(SpecRebootGroup.shape) as (keyof SpecRebootGroup)[];

/** A group's declared configuration with every field present. */
export type GroupConfig = Required<SpecRebootGroup>;

function pick(source: object, fields: readonly string[]): GroupConfig {
  const s = source as Record<string, unknown>;
  return Object.fromEntries(fields.map((f) => [f, s[f]])) as GroupConfig;
}

/** A declared group with every field, those left out as a new group has them. */
export const groupConfig = (group: SpecRebootGroup): GroupConfig =>
  // A new group's unclaimed-grant time is the queue's default until one is set (as its view shows).
  pick({ unclaimed_grant_s: UNCLAIMED_GRANT_S, ...configure(null, group as GroupChange, 0) }, GROUP_FIELDS);

/** The declared part of a group as the coordinator shows it (its view, or a pending push). */
export const configOf = (group: object): GroupConfig => pick(group, GROUP_FIELDS);
