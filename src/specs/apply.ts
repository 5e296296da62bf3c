/**
 * A spec's apply as one D1 batch: every row the plan changes (through the writers of fleet intent,
 * src/intent/batch.ts), the plan marks of the servers it re-plans, the coordinator's part as
 * fleet tasks (reboot groups, lock settings, webhooks), and one audit row — committed together with the
 * fleet's intent revision bump (src/fleets/service.ts changeIntent), or not at all.
 */
import { auditInsert } from "../db/audit";
import type { Db } from "../db/client";
import { fleetTask } from "../fleets/store";
import {
  channelDelete,
  channelRolloutWrite,
  channelWrite,
  fleetSettingsWrite,
  roleDelete,
  roleWrite,
} from "../intent/batch";
import { markFleet, markServersWithRole } from "../planner/service";
import { summaryOf, type SpecPlan } from "./diff";
import { serverStatements } from "./spec-servers";
import { fleetMappingWrite } from "../sso/store";

type Statement = Parameters<Db["batch"]>[0][number];

/** The statements of an apply at intent revision `rev` (the one its batch bumps to). */
export function applyStatements(
  db: Db,
  actor: string,
  fleet: string,
  rev: number,
  plan: SpecPlan,
  audit: { spec_hash: string; prune: boolean },
): Statement[] {
  const now = Date.now();
  const out: Statement[] = [];
  const s = plan.settings;
  if (plan.capabilities || Object.keys(s).length) {
    out.push(
      fleetSettingsWrite(db, fleet, {
        capabilities: plan.capabilities ?? undefined,
        staleAfterS: s.stale_after_s,
        lockTtlS: s.lock_ttl_s,
        allowUnknownIds: s.allow_unknown_ids,
        defaultGroupSlots: s.default_group_slots,
        disruptionBudget: s.disruption_budget,
        imagePolicy: s.image_policy,
      }),
    );
  }
  for (const c of plan.channels.write) {
    if (c.image) out.push(...channelWrite(db, actor, fleet, c.agent, c.input, c.previous, now));
    if (c.rolloutChanged) out.push(channelRolloutWrite(db, actor, fleet, c.agent, c.rollout, now));
  }
  for (const agent of plan.channels.remove) out.push(channelDelete(db, fleet, agent));
  // One mark per server however many of its inputs change: the planner runs once for the apply.
  const cause = { actor, action: "fleet.spec.apply" };
  if (plan.replan.fleet) out.push(...markFleet(db, fleet, rev, now, cause));
  else for (const role of plan.replan.roles) out.push(...markServersWithRole(db, fleet, role, rev, now, cause));
  for (const r of plan.roles.write) out.push(roleWrite(db, actor, fleet, r.role, r.agents, now));
  for (const role of plan.roles.remove) out.push(roleDelete(db, fleet, role));
  if (plan.groups) out.push(fleetTask(db, fleet, "apply_groups", rev, { rev, ...plan.groups }));
  if (plan.lockSettings) out.push(fleetTask(db, fleet, "push_settings", rev));
  // Webhooks too belong to the coordinator; their secrets are staged there, the task names the stage.
  out.push(...serverStatements(db, actor, fleet, plan.servers, now));
  // Live servers' labels are their ledgers': handed to each by the fleet task, as PATCH would.
  if (plan.servers.task)
    out.push(fleetTask(db, fleet, "apply_server_labels", rev, { actor, servers: plan.servers.task }));
  if (plan.webhooks) {
    const { needSecret: _n, ...hooks } = plan.webhooks;
    out.push(fleetTask(db, fleet, "apply_webhooks", rev, { rev, actor, ...hooks }));
  }
  // SSO access rows: D1's alone (sign-ins read them there), committed with the rest of the spec.
  for (const row of plan.access) out.push(fleetMappingWrite(db, fleet, row));
  out.push(
    auditInsert(
      db,
      {
        actor,
        action: "fleet.spec.apply",
        target: `fleet:${fleet}`,
        details: { ...audit, summary: summaryOf(plan.items), items: plan.items.filter((i) => i.op !== "unlisted") },
      },
      now,
    ),
  );
  return out;
}
