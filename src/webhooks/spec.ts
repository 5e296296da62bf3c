/**
 * A fleet spec's webhooks (docs/fleets-as-code.md), on the side of the object that keeps them and their secrets
 * (the fleet's coordinator). Pure over its store.
 *
 * Secrets never travel through D1: a spec's apply first stages the secrets it was sent here
 * (`stageSecrets`, durable before the D1 batch commits), and its `apply_webhooks` fleet task
 * carries only the stage's id. The task applies the declared webhooks in one turn, once per
 * intent revision (a late, older delivery changes nothing), taking each new or rotated secret from
 * its stage; a stage whose batch never committed is dropped after STAGE_TTL_MS.
 */
import { randomSecret, sha256Hex } from "../lib/crypto";
import type { WebhookFormat } from "../domain/enums";
import { MAX_WEBHOOKS_PER_FLEET } from "./manage";
import type { Webhook, WebhookStore } from "./store";

/** A webhook as a spec declares it: everything but its secret, which the spec only references. */
export interface DeclaredWebhook {
  url: string;
  events: string[];
  format: WebhookFormat;
  description: string | null;
  secret_env: string | null;
}

/** What an apply asks of the coordinator: every declared webhook (with the stage of a new secret), and the pruned ones. */
export interface WebhooksSpec {
  rev: number;
  /** Who applied the spec: the creator of the webhooks it adds. */
  actor: string;
  webhooks: Record<string, DeclaredWebhook & { secret_stage?: string }>;
  remove: string[];
}

/** Staged secrets of an apply that never committed are dropped after this long. */
const STAGE_TTL_MS = 24 * 3600_000;

/** The name a spec gives a webhook: its own, or (added through the API) its id. */
const specName = (w: Webhook) => w.name ?? w.id;

const declared = (w: Webhook): DeclaredWebhook => ({
  url: w.url,
  events: w.events,
  format: w.format,
  description: w.description,
  secret_env: w.secret_env ?? null,
});

/**
 * The fleet's webhooks by spec name, as declared, with the SHA-256 of each one's secret: the
 * Worker tells a sent secret from the kept one without the kept one leaving this object.
 */
export async function webhookSpecState(store: WebhookStore) {
  const out: Record<string, DeclaredWebhook & { secret_sha256: string }> = {};
  for (const w of store.all()) out[specName(w)] = { ...declared(w), secret_sha256: await sha256Hex(w.secret) };
  return out;
}

/** Keeps an apply's secrets (by webhook name) until its task applies them; answers the stage's id. */
export function stageSecrets(store: WebhookStore, secrets: Record<string, string>, now: number): string {
  for (const [id, stage] of store.stages()) if (now - stage.at > STAGE_TTL_MS) store.dropStage(id);
  const id = crypto.randomUUID();
  store.stage(id, { at: now, secrets });
  return id;
}

export interface WebhooksSpecOutcome {
  applied: boolean;
  added: string[];
  changed: string[];
  removed: string[];
}

/** Applies a spec's webhooks in one synchronous turn; an older revision than the last applied changes nothing. */
export function applyWebhookSpec(store: WebhookStore, spec: WebhooksSpec, now: number): WebhooksSpecOutcome {
  const out: WebhooksSpecOutcome = { applied: false, added: [], changed: [], removed: [] };
  if (spec.rev <= store.specRev) return out;
  const byName = new Map(store.all().map((w) => [specName(w), w]));
  const used = new Set<string>();
  for (const name of spec.remove) {
    const w = byName.get(name);
    if (!w) continue;
    store.delete(w.id);
    byName.delete(name);
    out.removed.push(name);
  }
  for (const [name, want] of Object.entries(spec.webhooks)) {
    const current = byName.get(name);
    const { secret_stage, ...fields } = want;
    if (secret_stage) used.add(secret_stage);
    const staged = secret_stage ? store.stage(secret_stage)?.secrets[name] : undefined;
    // The spec's apply refuses more (src/specs/webhooks.ts); only webhooks added through the API
    // since then get here, and the fleet never has more than the API allows.
    if (!current && byName.size >= MAX_WEBHOOKS_PER_FLEET) continue;
    // A secret is refused by the spec's apply unless it was sent; one lost with its stage (a task
    // owed for over a day) is replaced by a random one rather than leaving the webhook unsigned.
    const secret = staged ?? current?.secret ?? randomSecret();
    const next: Webhook = {
      id: current?.id ?? crypto.randomUUID(),
      name,
      ...fields,
      secret,
      created_at: current?.created_at ?? now,
      created_by: current?.created_by ?? spec.actor,
    };
    const same =
      current &&
      current.name === name &&
      current.secret === secret &&
      JSON.stringify(declared(current)) === JSON.stringify(declared(next));
    if (same) continue;
    store.put(next);
    byName.set(name, next);
    (current ? out.changed : out.added).push(name);
  }
  for (const id of used) store.dropStage(id);
  store.specRev = spec.rev;
  out.applied = true;
  return out;
}
