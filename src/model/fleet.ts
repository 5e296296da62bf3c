/**
 * A fleet as every feature names it: its id (the schema every route and token checks a fleet name
 * with), and what a fleet's coordinator is told by the others: the fleet's settings (from its D1
 * row, by the fleets feature and the rollouts) and a server's FleetLock identity (by the server's
 * ledger).
 */
import { z } from "@hono/zod-openapi";
import type { DisruptionBudget } from "../domain/disruption-budget";

export const FLEET_ID = /^[a-z0-9][a-z0-9-]{0,62}$/;

export const fleetId = z.string().regex(FLEET_ID, "fleet ids are 1-63 chars of a-z, 0-9 and '-'");

/** The fleet's settings the coordinator needs, pushed from D1 by every operator call. */
export interface FleetSettings {
  fleet_id: string;
  lock_ttl_s: number;
  allow_unknown_ids: boolean;
  default_group_slots: number | null;
  /** Absent in settings stored before budgets existed: none. */
  disruption_budget?: DisruptionBudget | null;
}

/** A server's FleetLock identity; `rev` orders pushes so a late, older one cannot win. */
export interface ServerIdentity {
  fleetlock_id: string | null;
  hostname: string;
  reboot_group: string;
  rev: number;
}
