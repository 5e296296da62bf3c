/**
 * Webhooks for operators (docs/notifications.md): validated here, kept and sent by the fleet's coordinator,
 * which owns the secrets (src/webhooks/store.ts). A URL must be one Harbormaster may call.
 */
import { getDb } from "../db/client";
import { DomainError, notFound } from "../domain/errors";
import type { Env } from "../env";
import { fleetSettings, getFleet } from "../fleets/store";
import { randomSecret } from "../lib/crypto";
import { outboundUrlProblem } from "../lib/url";
import { unwrap } from "../objects/kit/result";
import { coordinatorOf } from "../objects/stubs";
import type { WebhookFormat } from "../domain/enums";

async function settingsOf(env: Env, fleet: string) {
  const row = await getFleet(getDb(env.DB), fleet);
  if (!row) throw notFound("fleet", fleet);
  return fleetSettings(row);
}

export async function createWebhook(
  env: Env,
  actor: string,
  fleet: string,
  input: { url: string; events: string[]; format: WebhookFormat; description?: string | null; secret?: string },
) {
  const problem = outboundUrlProblem(input.url, env.ALLOW_LOOPBACK_HTTP === "1");
  if (problem) throw new DomainError("validation_failed", `url ${problem}`, [{ path: "url", message: problem }]);
  const settings = await settingsOf(env, fleet);
  const secret = input.secret ?? randomSecret();
  const r = unwrap(await coordinatorOf(env, fleet).createWebhook(settings, { ...input, secret }, actor));
  return { webhook: r.webhook, secret };
}

export async function listWebhooks(env: Env, fleet: string) {
  await settingsOf(env, fleet);
  return coordinatorOf(env, fleet).listWebhooks();
}

export async function getWebhook(env: Env, fleet: string, id: string) {
  await settingsOf(env, fleet);
  return unwrap(await coordinatorOf(env, fleet).getWebhook(id)).webhook;
}

export async function deleteWebhook(env: Env, actor: string, fleet: string, id: string) {
  const settings = await settingsOf(env, fleet);
  return unwrap(await coordinatorOf(env, fleet).deleteWebhook(settings, id, actor)).webhook;
}

export async function webhookDeliveries(env: Env, fleet: string, id: string, limit: number) {
  await settingsOf(env, fleet);
  return unwrap(await coordinatorOf(env, fleet).webhookDeliveries(id, limit)).items;
}

export async function webhookDelivery(env: Env, fleet: string, id: string, deliveryId: string) {
  await settingsOf(env, fleet);
  return unwrap(await coordinatorOf(env, fleet).webhookDelivery(id, deliveryId)).delivery;
}

export async function testWebhook(env: Env, actor: string, fleet: string, id: string) {
  const settings = await settingsOf(env, fleet);
  return unwrap(await coordinatorOf(env, fleet).testWebhook(settings, id, actor)).delivery;
}
