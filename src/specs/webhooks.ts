/**
 * The webhooks section of a fleet spec (pure): how a webhook reads in a spec, what a spec would
 * change, and what its apply asks of the coordinator (src/webhooks/spec.ts).
 *
 * A secret is never part of the document: `secret_ref: {env: NAME}` names the environment
 * variable hm reads it from, and hm sends its value beside the spec. A secret that was sent and
 * differs from the kept one (their SHA-256 are compared) is a change of its webhook; one not sent
 * leaves the kept one. A new webhook needs one (the apply refuses it otherwise: a secret shown
 * once in an apply's answer would end up in CI logs).
 */
import { MAX_WEBHOOKS_PER_FLEET } from "../webhooks/manage";
import type { DeclaredWebhook, WebhooksSpec } from "../webhooks/spec";
import type { SpecWebhook } from "../webhooks/schemas";
import { byKey } from "./canonical";
import type { DiffItem } from "./schemas";
import type { Problem } from "./validate";

/** A webhook as a spec document shows it (what GET …/spec answers and the diff compares). */
export const specForm = (w: DeclaredWebhook) => ({
  url: w.url,
  // Kept as the spec's schema checked them.
  events: w.events as SpecWebhook["events"],
  format: w.format,
  ...(w.description != null ? { description: w.description } : {}),
  ...(w.secret_env ? { secret_ref: { env: w.secret_env } } : {}),
});

/** A spec's webhook as the coordinator keeps it (events as a sorted set, no description as null). */
const declaredOf = (w: SpecWebhook): DeclaredWebhook => ({
  url: w.url,
  events: [...new Set(w.events)].sort(),
  format: w.format,
  description: w.description ?? null,
  secret_env: w.secret_ref?.env ?? null,
});

/** The secret sent for each of the spec's webhooks (by webhook name), from the secrets by variable name. */
export function sentSecrets(webhooks: Record<string, SpecWebhook>, secrets: Record<string, string>) {
  const out: Record<string, string> = {};
  for (const [name, w] of Object.entries(webhooks)) {
    const env = w.secret_ref?.env;
    if (env && Object.hasOwn(secrets, env)) out[name] = secrets[env];
  }
  return out;
}

export interface WebhookState {
  declared: Record<string, DeclaredWebhook>;
  /** SHA-256 of each kept secret; absent while a staged one is still owed (a sent secret then counts as new). */
  digests: Record<string, string>;
  pending: WebhooksSpec | null;
}

/**
 * The diff's webhook items are computed by diffMap over these forms: a webhook whose secret
 * changes carries a `secret` marker, so it is a change like any other field (never the secret).
 */
export function comparable(
  state: WebhookState,
  spec: Record<string, SpecWebhook>,
  sentDigests: Record<string, string>,
) {
  const current: Record<string, unknown> = {};
  const desired: Record<string, unknown> = {};
  const rotate = new Set<string>();
  for (const [name, w] of Object.entries(state.declared)) current[name] = specForm(w);
  for (const [name, w] of Object.entries(spec)) {
    desired[name] = specForm(declaredOf(w));
    const sent = sentDigests[name];
    if (sent && Object.hasOwn(current, name) && state.digests[name] !== sent) {
      rotate.add(name);
      current[name] = { ...(current[name] as object), secret: "(kept)" };
      desired[name] = { ...(desired[name] as object), secret: `(new, from $${w.secret_ref!.env})` };
    }
  }
  return { current, desired, rotate };
}

/** New webhooks with no secret sent: the apply refuses them (the diff only notes it). */
export function missingSecrets(
  items: DiffItem[],
  spec: Record<string, SpecWebhook>,
  sent: Record<string, string>,
): Problem[] {
  return items
    .filter((i) => i.section === "webhooks" && i.op === "add" && !Object.hasOwn(sent, i.name))
    .map((i) => {
      const env = spec[i.name]?.secret_ref?.env;
      return {
        path: `webhooks.${i.name}.secret_ref`,
        message: env
          ? `a new webhook needs its secret, and $${env} was not sent: set it where hm runs`
          : "a new webhook needs a signing secret: name the environment variable hm reads it from (secret_ref: {env: NAME})",
      };
    });
}

/**
 * More webhooks than a fleet may have once the spec is applied: its schema bounds the spec's own,
 * but those it does not list (added through the API) are kept without prune, and the coordinator
 * could only leave a new one out.
 */
export function webhookCountProblems(state: WebhookState, items: DiffItem[]): Problem[] {
  const after = new Set(Object.keys(state.declared));
  for (const i of items) {
    if (i.section !== "webhooks") continue;
    if (i.op === "add") after.add(i.name);
    if (i.op === "remove") after.delete(i.name);
  }
  if (after.size <= MAX_WEBHOOKS_PER_FLEET) return [];
  const kept = items.filter((i) => i.section === "webhooks" && i.op === "unlisted").length;
  return [
    {
      path: "webhooks",
      message:
        `the fleet would have ${after.size} webhooks, and it may have at most ${MAX_WEBHOOKS_PER_FLEET}` +
        (kept ? ` (${kept} the spec does not list are kept: list them, or apply with prune to remove them)` : ""),
    },
  ];
}

/**
 * What the coordinator is to hold: every declared webhook, merged over what an earlier apply still
 * owes it (so a newer task, which replaces the older, loses nothing), each new or rotated one with
 * `stage` (the id its secret is staged under, filled in by the apply), and the pruned ones.
 */
export function webhooksTask(
  state: WebhookState,
  spec: Record<string, SpecWebhook>,
  items: DiffItem[],
  needSecret: Set<string>,
): Omit<WebhooksSpec, "rev" | "actor"> & { needSecret: string[] } {
  const owed: Pick<WebhooksSpec, "webhooks" | "remove"> = state.pending ?? { webhooks: {}, remove: [] };
  const remove = items.filter((i) => i.op === "remove").map((i) => i.name);
  const all: WebhooksSpec["webhooks"] = { ...owed.webhooks };
  for (const [name, w] of Object.entries(spec)) {
    const stage = needSecret.has(name) ? undefined : owed.webhooks[name]?.secret_stage;
    all[name] = { ...declaredOf(w), ...(stage ? { secret_stage: stage } : {}) };
  }
  for (const name of remove) delete all[name];
  return {
    webhooks: byKey(Object.entries(all)),
    remove: [...new Set([...owed.remove.filter((n) => !Object.hasOwn(all, n)), ...remove])].sort(),
    needSecret: [...needSecret].sort(),
  };
}
