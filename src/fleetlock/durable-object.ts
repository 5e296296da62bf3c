import { DurableObject } from "cloudflare:workers";
import type { Env } from "../env";
import type { Failure } from "../objects/kit/result";
import { assemble } from "./assemble";
import { getDb } from "../db/client";
import { fail } from "../objects/kit/result";
import { publishHealthWatch, watchBeforeCreating } from "./health-watch";
import { audit } from "./effects";
import * as gateRules from "./gate-rules";
import type { GateConfig } from "./gates";
import * as grants from "./grants";
import * as health from "./health";
import type { ServerHealthEvent } from "./ledger-side";
import * as groups from "./groups";
import * as identity from "./identity";
import * as names from "./names";
import type { CoordinatorParts } from "./parts";
import type { FleetSettings, ServerIdentity } from "../model/fleet";
import { fireTimers } from "./timers";
import { answered, PRE_REBOOT_WAIT_PATH, preRebootWaitOf } from "./waits";
import type { ClientParams, FleetLockFailure } from "./protocol";
import * as slots from "./rollout-slots";
import {
  allowFixes,
  fixHoldViews,
  fixOutcomes,
  releaseFixHold,
  type FixAllowance,
  type FixHoldView,
  type FixOutcome,
  type FixTarget,
} from "./fix-budget";
import * as disruption from "./disruption";
import type { StoredMember } from "./disruption-store";
import * as specGroups from "./spec-groups";
import type { GroupChange, Holder } from "./semaphore";
import type { FleetEvent } from "../webhooks/events";
import * as hooks from "../webhooks/manage";
import * as hookSpec from "../webhooks/spec";
import type { GroupView } from "./views";

// Kept where callers have always found them.

/**
 * One per fleet: a counting semaphore per reboot group, the fair queue in front of it, and the
 * fleet's FleetLock key and identity registry. A thin surface: every method hands the call to the
 * module that decides it (grants, groups, identity, rollout-slots), with the object's parts.
 * Nothing waits in here: a parked pre-reboot waits in the Worker on a hibernatable waiter socket
 * (./waits.ts, ./parked.ts), and the queue's deadlines are a timer on the alarm, so the object
 * sleeps while hosts wait.
 */
export class RebootCoordinator extends DurableObject<Env> {
  /** Built once from the constructor's arguments (./assemble.ts); anew only when the fleet is deleted. */
  private parts: CoordinatorParts;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.parts = assemble(
      ctx,
      () => this.env,
      () => Date.now(),
    );
  }

  /** Dispatches every due timer to its handler (./timers.ts). */
  async alarm() {
    await fireTimers(this.parts);
  }

  // ---- host path (FleetLock) ----

  /**
   * A pre-reboot, sent by the Worker as a WebSocket upgrade (./waits.ts): answered at once as JSON,
   * or its place stored and a hibernatable waiter handed back (101); the Worker holds the request.
   */
  async fetch(request: Request): Promise<Response> {
    if (new URL(request.url).pathname !== PRE_REBOOT_WAIT_PATH) return new Response(null, { status: 404 });
    const { keyHash, params, resume } = preRebootWaitOf(request);
    const answer = await grants.preReboot(this.parts, keyHash, params, { resume, ask: this.parts.ask });
    return answer.ok === "waiting" ? answer.waiter : answered(answer);
  }

  /** Waiters never speak. */
  async webSocketMessage() {}

  /** A waiter closed: its host's client went away (the Worker saw it hang up). It keeps its place. */
  async webSocketClose(ws: WebSocket) {
    this.parts.parked.closed(ws);
  }

  async webSocketError(ws: WebSocket) {
    this.parts.parked.closed(ws);
  }

  async steadyState(
    keyHash: string,
    params: ClientParams,
  ): Promise<{ ok: true; released: boolean } | FleetLockFailure> {
    return grants.steadyState(this.parts, keyHash, params, this.parts.ask);
  }

  /** Whether `keyHash` is the fleet's key (the Worker asks before refusing a FleetLock body). */
  async keyMatches(keyHash: string): Promise<boolean> {
    return grants.keyMatches(this.parts, keyHash);
  }

  // ---- fleet configuration ----

  /**
   * The fleet was deleted: its groups, holders, registry, key and webhooks go. Idempotent. Its
   * webhook deliveries still owed are dropped, not awaited (docs/notifications.md): a receiver that
   * is down must not keep the fleet's id taken. Audit rows still queued are delivered first (D1, not
   * an outsider); should D1 refuse them, everything stays for the cron's retry.
   */
  async forget(): Promise<void> {
    this.parts.webhooks.drop("dropped: the fleet was deleted");
    // Console notices of the fleet being deleted are not worth the wait; nor are deliveries
    // stored by earlier code in the outbox.
    this.parts.outbox.discard("feed");
    this.parts.outbox.discard("webhook");
    await this.parts.outbox.flush();
    if (this.parts.outbox.pending() > 0) throw new Error("audit rows still pending; retry the wipe later");
    await this.parts.store.wipe();
    // A fleet of the same name may come next: its parts start from empty storage, no cache kept.
    this.parts = assemble(this.ctx, () => this.env, this.parts.clock);
  }

  /** PATCH /v1/fleets/{fleet}: the fleet's settings, as D1 now holds them. */
  async updateSettings(settings: FleetSettings): Promise<void> {
    const before = JSON.stringify(this.parts.store.config?.disruption_budget ?? null);
    this.parts.store.syncSettings(settings);
    // A larger budget (or none) frees what waited for it.
    if (JSON.stringify(settings.disruption_budget ?? null) !== before) this.parts.budgetWatch.touch(true);
  }

  /** A server's ledger describes it (hostname, labels): the disruption budget counts by them. */
  async serverMember(serverId: string, m: StoredMember): Promise<void> {
    disruption.serverMember(this.parts, serverId, m);
  }

  /** Installs a new key; the previous one stops working with this write. */
  async setKey(settings: FleetSettings, keyHash: string, actor: string): Promise<void> {
    this.parts.store.putConfig({ ...settings, key_hash: keyHash });
    await audit(this.parts, [{ actor, action: "fleet.fleetlock_key.rotate", target: `fleet:${settings.fleet_id}` }], {
      wait: true,
    });
  }

  // ---- the FleetLock identity registry ----

  async reserveClientId(fleetlockId: string, serverId: string): Promise<{ ok: true; until: number | null } | Failure> {
    return identity.reserve(this.parts, this.parts.ask, fleetlockId, serverId);
  }

  /** A registration's hostname and fleetlock_id, both or neither (./names.ts), until its ledger commits. */
  async reserveRegistration(
    hostname: string,
    fleetlockId: string | null,
    serverId: string,
  ): Promise<{ ok: true; until: number } | Failure> {
    return names.reserveRegistration(this.parts, this.parts.ask, hostname, fleetlockId, serverId);
  }

  /** A fleet deletion about to commit: no registration in flight, and none from now on (./names.ts). */
  async sealForDeletion(): Promise<{ ok: true } | Failure> {
    return names.sealForDeletion(this.parts);
  }

  /** The deletion was refused: registrations may come again. */
  async unseal(): Promise<void> {
    names.unseal(this.parts);
  }

  /** The server was removed: its hostname is free again. */
  async releaseHostname(serverId: string, hostname: string): Promise<void> {
    names.releaseHostname(this.parts, serverId, hostname);
  }

  async setServerIdentity(serverId: string, id: ServerIdentity): Promise<{ applied: boolean; conflict?: boolean }> {
    return identity.setIdentity(this.parts, serverId, id);
  }

  async adoptIdentity(serverId: string, id: ServerIdentity): Promise<{ applied: boolean }> {
    return identity.adoptIdentity(this.parts, serverId, id);
  }

  // ---- reboot groups ----

  async putGroup(settings: FleetSettings, name: string, change: GroupChange, actor: string): Promise<GroupView> {
    return groups.putGroup(this.parts, settings, name, change, actor);
  }

  async getGroup(settings: FleetSettings, name: string): Promise<{ ok: true; group: GroupView } | Failure> {
    return groups.getGroup(this.parts, settings, name);
  }

  async listGroups(settings: FleetSettings): Promise<GroupView[]> {
    return groups.listGroups(this.parts, settings);
  }

  /** A fleet spec's reboot groups, delivered by its `apply_groups` fleet task. */
  async applyGroupSpec(settings: FleetSettings, spec: specGroups.GroupsSpec): Promise<specGroups.GroupsSpecOutcome> {
    return specGroups.applyGroupSpec(this.parts, settings, spec);
  }

  // ---- health gates ----

  async fleetGates(settings: FleetSettings) {
    return gateRules.fleetGatesView(this.parts, settings);
  }

  async putFleetGates(settings: FleetSettings, gates: GateConfig, actor: string) {
    return gateRules.putFleetGates(this.parts, settings, gates, actor);
  }

  async setHold(
    settings: FleetSettings,
    group: string | null,
    hold: { reason: string; until: number | null } | null,
    actor: string,
  ) {
    return gateRules.setHold(this.parts, settings, group, hold, actor);
  }

  /** What /metrics shows of this fleet: its groups (gates included) and its webhook deliveries. */
  async metrics(settings: FleetSettings) {
    return { groups: groups.listGroups(this.parts, settings), webhooks: this.parts.webhookStore.counts() };
  }

  // ---- webhooks: this object sends the fleet's (src/webhooks/) ----

  async createWebhook(settings: FleetSettings, input: hooks.WebhookInput, actor: string) {
    this.parts.store.syncSettings(settings);
    // In D1 before the webhook exists: a drift reported after the answer reaches it.
    if (!(await watchBeforeCreating(getDb(this.env.DB), settings.fleet_id, input.events)))
      return fail("unavailable", "the fleet's index did not take the change; the webhook was not created: try again");
    const r = hooks.createWebhook(this.parts.webhookStore, input, actor, this.parts.clock());
    if (r.ok) publishHealthWatch(this.parts, settings.fleet_id);
    if (r.ok)
      await this.#audited(actor, "webhook.create", { id: r.webhook.id, url: r.webhook.url, events: r.webhook.events });
    return r;
  }

  async listWebhooks() {
    return this.parts.webhookStore.all().map(hooks.webhookView);
  }

  async getWebhook(id: string) {
    return hooks.getWebhook(this.parts.webhookStore, id);
  }

  async deleteWebhook(settings: FleetSettings, id: string, actor: string) {
    this.parts.store.syncSettings(settings);
    const r = hooks.deleteWebhook(this.parts.webhookStore, id);
    if (r.ok) publishHealthWatch(this.parts, settings.fleet_id);
    if (r.ok) await this.#audited(actor, "webhook.delete", { id, url: r.webhook.url });
    return r;
  }

  /** A fleet spec's webhooks: their declared fields and secrets' digests; stage an apply's secrets; apply its task. */
  async webhookSpecState() {
    return hookSpec.webhookSpecState(this.parts.webhookStore);
  }

  async stageWebhookSecrets(secrets: Record<string, string>): Promise<string> {
    return hookSpec.stageSecrets(this.parts.webhookStore, secrets, this.parts.clock());
  }

  async applyWebhookSpec(settings: FleetSettings, spec: hookSpec.WebhooksSpec): Promise<hookSpec.WebhooksSpecOutcome> {
    this.parts.store.syncSettings(settings);
    // As createWebhook's: in D1 first. Refused, the task fails and the cron runs it again.
    const events = Object.values(spec.webhooks).flatMap((w) => w.events);
    if (!(await watchBeforeCreating(getDb(this.env.DB), settings.fleet_id, events)))
      throw new Error("the fleet's index did not take its health watch; the spec's webhooks were not applied");
    const out = hookSpec.applyWebhookSpec(this.parts.webhookStore, spec, this.parts.clock());
    // Delivered before the answer, like createWebhook's: a drift reported after it reaches them.
    if (publishHealthWatch(this.parts, settings.fleet_id)) {
      await this.parts.scheduler.arm();
      await this.parts.outbox.flush();
    }
    return out;
  }

  /**
   * Events other owners raise (a ledger's or a rollout's outbox, the cron's stale and upgrade
   * notices): each is sent to the webhooks that want it once, however often it arrives (by id).
   */
  async fleetEvents(events: FleetEvent[]): Promise<void> {
    for (const e of events) this.parts.webhooks.take(e);
    await this.parts.scheduler.arm();
  }

  async webhookDeliveries(id: string, limit: number) {
    return hooks.deliveriesOf(this.parts.webhookStore, id, limit);
  }

  async webhookDelivery(id: string, deliveryId: string) {
    return hooks.deliveryOf(this.parts.webhookStore, id, deliveryId);
  }

  /** Queued and sent as every delivery is, at once; the answer does not wait for the receiver. */
  async testWebhook(settings: FleetSettings, id: string, actor: string) {
    this.parts.store.syncSettings(settings);
    return hooks.testWebhook(
      this.parts.webhookStore,
      this.parts.webhooks,
      settings.fleet_id,
      id,
      actor,
      this.parts.clock(),
    );
  }

  async #audited(actor: string, action: string, details: Record<string, unknown>) {
    const target = `fleet:${this.parts.store.config?.fleet_id ?? "?"}`;
    await audit(this.parts, [{ actor, action, target, details }], { wait: true });
  }

  // ---- releases ----

  async forceRelease(
    settings: FleetSettings,
    name: string,
    id: string,
    actor: string,
  ): Promise<{ ok: true; released: Holder; group: GroupView } | Failure> {
    return grants.forceRelease(this.parts, settings, name, id, actor);
  }

  async dequeueHost(settings: FleetSettings, name: string, id: string, actor: string) {
    return groups.dequeueHost(this.parts, settings, name, id, actor);
  }

  async releaseServer(
    serverId: string,
    opts: { reason: string; actor: string; granted_before?: number },
  ): Promise<(Holder & { group: string })[]> {
    return grants.releaseServer(this.parts, serverId, opts);
  }

  /** A server's ledger: a new boot, realized, failed or drifted (./ledger-side.ts). */
  async serverHealth(event: ServerHealthEvent): Promise<void> {
    await health.serverHealth(this.parts, event);
  }

  // ---- rollout slots ----

  /** Which of these servers a drift fix may disrupt now; `call` names the fix call (./fix-budget.ts). */
  async allowFixes(
    settings: FleetSettings,
    targets: FixTarget[],
    actor: string,
    call: string,
  ): Promise<Record<string, FixAllowance>> {
    const out = allowFixes(this.parts, settings, targets, actor, call);
    await this.parts.scheduler.arm();
    return out;
  }

  /** What a fix call's writes came to: each server's hold is settled on it (./fix-budget.ts). */
  async fixOutcomes(call: string, outcomes: FixOutcome[]): Promise<void> {
    if (fixOutcomes(this.parts, call, outcomes)) await this.parts.scheduler.arm();
  }

  /** What drift fixes hold of the fleet's budget (an operator's view). */
  async fixHolds(settings: FleetSettings): Promise<FixHoldView[]> {
    return fixHoldViews(this.parts, settings);
  }

  /** An operator frees what a drift fix holds for a server (`ref`: its id or hostname), audited. */
  async releaseFixHold(
    settings: FleetSettings,
    ref: string,
    actor: string,
  ): Promise<{ ok: true; released: FixHoldView } | Failure> {
    return releaseFixHold(this.parts, settings, ref, actor);
  }

  async acquireRolloutSlot(settings: FleetSettings, req: slots.RolloutSlotRequest): Promise<slots.RolloutSlotAnswer> {
    return slots.acquireRolloutSlot(this.parts, settings, req);
  }

  async releaseRolloutSlot(holder: string, rolloutId: string): Promise<{ ok: true; released: boolean }> {
    return slots.releaseRolloutSlot(this.parts, holder, rolloutId);
  }
}
