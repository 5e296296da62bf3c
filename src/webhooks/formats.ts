/**
 * The two bodies a webhook can ask for (pure): CloudEvents 1.0 in structured JSON mode
 * (https://github.com/cloudevents/spec, v1.0.2), or a Slack-compatible message (`{"text": …}`,
 * what Slack's incoming webhooks and most chat tools take).
 */
import type { WebhookFormat } from "../domain/enums";
import type { FleetEvent } from "./events";

/** CloudEvents `type` values are reverse-DNS prefixed; the rest is the event's own name. */
const CLOUDEVENTS_TYPE_PREFIX = "dev.harbormaster.";

function cloudEvent(e: FleetEvent) {
  return {
    specversion: "1.0",
    id: e.id,
    source: `/fleets/${e.fleet}`,
    type: `${CLOUDEVENTS_TYPE_PREFIX}${e.type}`,
    subject: e.subject,
    time: new Date(e.time).toISOString(),
    datacontenttype: "application/json",
    data: { fleet: e.fleet, summary: e.summary, ...e.data },
  };
}

const ICON: Partial<Record<string, string>> = {
  "reboot.unhealthy_after_reboot": ":rotating_light:",
  "reboot.gate_closed": ":no_entry:",
  "reboot.gate_opened": ":white_check_mark:",
  "reboot.stuck": ":hourglass:",
  "server.failed": ":x:",
  "rollout.failed": ":x:",
  "webhook.test": ":wave:",
};

function slackMessage(e: FleetEvent) {
  const icon = ICON[e.type] ?? ":information_source:";
  return { text: `${icon} [${e.fleet}] ${e.summary}` };
}

/** The body and its Content-Type for a webhook of this format. */
export function bodyOf(format: WebhookFormat, e: FleetEvent): { body: string; contentType: string } {
  if (format === "slack") return { body: JSON.stringify(slackMessage(e)), contentType: "application/json" };
  return { body: JSON.stringify(cloudEvent(e)), contentType: "application/cloudevents+json" };
}
