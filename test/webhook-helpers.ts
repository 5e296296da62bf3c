import { runInDurableObject } from "cloudflare:test";
import type { Fetcher } from "../src/webhooks/dispatch";
import { call } from "./helpers";
import { coordinator } from "./support/objects";

export type Sent = { url: string; headers: Headers; body: string };

/** Answers the coordinator's webhook requests with `statuses` in turn (then 200), recording each. */
export async function receiver(fleet: string, statuses: number[] = []) {
  const sent: Sent[] = [];
  const fetcher: Fetcher = async (url, init) => {
    sent.push({ url, headers: new Headers(init.headers), body: String(init.body) });
    return new Response("ok", { status: statuses.shift() ?? 200 });
  };
  await runInDurableObject(coordinator(fleet), (instance) => {
    (instance as unknown as { parts: { webhooks: { fetcher: Fetcher } } }).parts.webhooks.fetcher = fetcher;
  });
  return sent;
}

/** Every send under way and every one due now has finished (the dispatcher sends without being awaited). */
export async function sendsSettled(fleet: string) {
  await runInDurableObject(coordinator(fleet), async (instance) => {
    const hooks = (instance as unknown as { parts: { webhooks: { pump(): void; idle(): Promise<void> } } }).parts
      .webhooks;
    hooks.pump();
    await hooks.idle();
  });
}

export const createWebhook = (fleet: string, body: Record<string, unknown>) =>
  call("POST", `/v1/fleets/${fleet}/webhooks`, { body });

/** A webhook for `events` at its own URL; its deliveries are the sent requests to that URL. */
export async function hook(fleet: string, name: string, events: string[]) {
  const res = await createWebhook(fleet, { url: `https://hooks.example.com/${name}`, events });
  if (res.status !== 201) throw new Error(`webhook: ${res.status} ${JSON.stringify(res.json)}`);
  return `https://hooks.example.com/${name}`;
}

/** The event types a URL received, in order. */
export const receivedBy = (sent: Sent[], url: string) =>
  sent.filter((s) => s.url === url).map((s) => s.headers.get("x-harbormaster-event"));

export const bodiesOf = (sent: Sent[], url: string) => sent.filter((s) => s.url === url).map((s) => JSON.parse(s.body));
