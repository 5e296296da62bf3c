/**
 * Webhooks in a fleet spec (docs/fleets-as-code.md): declared by name, their secrets only referenced
 * (`secret_ref: {env}`), the values sent beside the document and kept only by the coordinator.
 */
import { createScheduledController, env, runInDurableObject } from "cloudflare:test";
import { runScheduled } from "../src/scheduled";
import { applyFleetSpec } from "../src/specs/service";
import { describe, expect, it } from "vitest";
import type { Fetcher } from "../src/webhooks/dispatch";
import { MAX_WEBHOOKS_PER_FLEET } from "../src/webhooks/manage";
import { verify } from "../src/webhooks/signing";
import { breakD1, call } from "./helpers";
import { auditOf, clone, fleetWithIntent, getSpec } from "./specs-helpers";
import { coordinator } from "./support/objects";
import { sendsSettled } from "./webhook-helpers";

const SECRET = "first-secret-0123456789abcdef";
const ROTATED = "second-secret-0123456789abcdef";
const ALERTS = {
  url: "https://hooks.example.com/alerts",
  events: ["reboot.stuck", "reboot.granted"],
  format: "cloudevents",
  secret_ref: { env: "ALERTS_SECRET" },
};

const send = (
  method: "PUT" | "POST",
  fleet: string,
  spec: unknown,
  secrets: Record<string, string> | null,
  opts: { prune?: boolean } = {},
) =>
  call(method, `/v1/fleets/${fleet}/spec${method === "POST" ? ":diff" : ""}${opts.prune ? "?prune=true" : ""}`, {
    body: secrets ? { spec, secrets } : spec,
  });

async function withAlerts() {
  const { fleet } = await fleetWithIntent();
  const spec = clone((await getSpec(fleet)).spec);
  spec.webhooks = { alerts: ALERTS };
  const res = await send("PUT", fleet, spec, { ALERTS_SECRET: SECRET });
  expect(res.status).toBe(200);
  return { fleet, spec };
}

/** The signature of a test delivery to the fleet's webhook `id`, checked against `secret`. */
async function signedWith(fleet: string, id: string, secret: string) {
  const sent: { headers: Headers; body: string }[] = [];
  const fetcher: Fetcher = async (_url, init) => {
    sent.push({ headers: new Headers(init.headers), body: String(init.body) });
    return new Response("ok");
  };
  await runInDurableObject(coordinator(fleet), (instance) => {
    (instance as unknown as { parts: { webhooks: { fetcher: Fetcher } } }).parts.webhooks.fetcher = fetcher;
  });
  expect((await call("POST", `/v1/fleets/${fleet}/webhooks/${id}/test`)).status).toBe(202);
  await sendsSettled(fleet);
  return verify(secret, sent[0].body, sent[0].headers.get("x-harbormaster-signature"));
}

const hooksOf = async (fleet: string) =>
  (await call("GET", `/v1/fleets/${fleet}/webhooks`)).json.items as {
    id: string;
    name: string | null;
    events: string[];
  }[];

describe("webhooks in a fleet spec", () => {
  it("are created with the referenced secret, exported with the reference only, and round-trip as a no-op", async () => {
    const { fleet } = await withAlerts();
    const [hook] = await hooksOf(fleet);
    expect(hook).toMatchObject({ name: "alerts", events: ["reboot.granted", "reboot.stuck"] });
    expect(await signedWith(fleet, hook.id, SECRET)).toBe(true);

    const { spec, etag } = await getSpec(fleet);
    expect(spec.webhooks).toEqual({ alerts: { ...ALERTS, events: ["reboot.granted", "reboot.stuck"] } });
    expect(JSON.stringify(spec)).not.toContain(SECRET);
    expect(JSON.stringify(await auditOf(fleet))).not.toContain(SECRET);
    // The export applied as it is, with the same secret or none: nothing to change.
    for (const secrets of [{ ALERTS_SECRET: SECRET }, null]) {
      const d = await send("POST", fleet, spec, secrets, { prune: true });
      expect(d.json).toMatchObject({ equal: true, items: [] });
      const res = await call("PUT", `/v1/fleets/${fleet}/spec?prune=true`, {
        body: secrets ? { spec, secrets } : spec,
        headers: { "If-Match": etag },
      });
      expect(res.json).toMatchObject({ changed: false, equal: true });
    }
    expect((await hooksOf(fleet))[0].id).toBe(hook.id);
  });

  it("lists a changed webhook field by field, a new secret as a change that never shows it, and applies both", async () => {
    const { fleet, spec } = await withAlerts();
    const [hook] = await hooksOf(fleet);
    spec.webhooks.alerts = { ...ALERTS, events: ["reboot.stuck"], format: "slack" };
    const d = await send("POST", fleet, spec, { ALERTS_SECRET: ROTATED });
    expect(d.json.items).toEqual([
      expect.objectContaining({
        op: "change",
        path: "webhooks.alerts",
        before: expect.objectContaining({
          events: ["reboot.granted", "reboot.stuck"],
          format: "cloudevents",
          secret: "(kept)",
        }),
        after: expect.objectContaining({
          events: ["reboot.stuck"],
          format: "slack",
          secret: "(new, from $ALERTS_SECRET)",
        }),
      }),
    ]);
    expect(JSON.stringify(d.json)).not.toContain(ROTATED);
    const res = await send("PUT", fleet, spec, { ALERTS_SECRET: ROTATED });
    expect(res.json).toMatchObject({ changed: true, summary: { change: 1 } });
    expect(JSON.stringify(await auditOf(fleet))).not.toContain(ROTATED);
    expect(await hooksOf(fleet)).toEqual([expect.objectContaining({ id: hook.id, events: ["reboot.stuck"] })]);
    expect(await signedWith(fleet, hook.id, ROTATED)).toBe(true);
    // Without the secret, the webhook keeps the one it has.
    spec.webhooks.alerts.description = "pager";
    expect((await send("PUT", fleet, spec, null)).json).toMatchObject({ changed: true });
    expect(await signedWith(fleet, hook.id, ROTATED)).toBe(true);
  });

  it("refuses secrets in a diff with a read token, which could otherwise confirm a guessed secret; without them it diffs", async () => {
    const { fleet, spec } = await withAlerts();
    const tokenOf = async (scope: string) =>
      (await call("POST", "/v1/tokens", { body: { name: `${scope} bot`, scope } })).json.token as string;
    const reader = await tokenOf("read");
    const diffAs = (token: string, secrets: Record<string, string> | null) =>
      call("POST", `/v1/fleets/${fleet}/spec:diff`, { token, body: secrets ? { spec, secrets } : spec });
    // The right secret and a wrong one are answered alike.
    for (const guess of [SECRET, ROTATED]) {
      const res = await diffAs(reader, { ALERTS_SECRET: guess });
      expect(res.status).toBe(403);
      expect(res.json.error.code).toBe("forbidden");
    }
    expect((await diffAs(reader, null)).json).toMatchObject({ equal: true });
    const writer = await tokenOf("write");
    expect((await diffAs(writer, { ALERTS_SECRET: ROTATED })).json).toMatchObject({
      equal: false,
      summary: { change: 1 },
    });
  });

  it("leaves a webhook the spec does not list (unlisted), and removes it with prune", async () => {
    const { fleet, spec } = await withAlerts();
    delete spec.webhooks.alerts;
    expect((await send("PUT", fleet, spec, null)).json.items).toEqual([
      expect.objectContaining({ op: "unlisted", path: "webhooks.alerts" }),
    ]);
    expect(await hooksOf(fleet)).toHaveLength(1);
    const pruned = await send("PUT", fleet, spec, null, { prune: true });
    expect(pruned.json).toMatchObject({ changed: true, summary: { remove: 1 } });
    expect(await hooksOf(fleet)).toEqual([]);
    expect((await getSpec(fleet)).spec.webhooks).toEqual({});
  });

  it("converge through the fleet task when the coordinator cannot take them after D1 committed, the secret staged first", async () => {
    const { fleet } = await fleetWithIntent();
    const spec = clone((await getSpec(fleet)).spec);
    spec.webhooks = { alerts: ALERTS };
    const unreachable = {
      ...env,
      REBOOT: new Proxy(env.REBOOT, {
        get(target, prop) {
          if (prop !== "get") return Reflect.get(target, prop);
          return (id: DurableObjectId) =>
            new Proxy(target.get(id), {
              get: (s, p) =>
                p === "applyWebhookSpec"
                  ? () => Promise.reject(new Error("simulated: coordinator unreachable"))
                  : Reflect.get(s, p),
            });
        },
      }),
    } as typeof env;
    const out = await applyFleetSpec(
      unreachable,
      { waitUntil() {} },
      "test",
      fleet,
      { spec, secrets: { ALERTS_SECRET: SECRET } },
      { prune: false },
    );
    expect(out).toMatchObject({ changed: true, coordinator: { pending: true } });
    // Shown as applied meanwhile; the secret is nowhere in D1 (the task names its stage).
    expect((await getSpec(fleet)).spec.webhooks).toEqual({
      alerts: { ...ALERTS, events: ["reboot.granted", "reboot.stuck"] },
    });
    const tasks = await env.DB.prepare("SELECT payload FROM fleet_tasks WHERE fleet_id = ?").bind(fleet).all();
    expect(JSON.stringify(tasks.results)).toContain("secret_stage");
    expect(JSON.stringify(tasks.results)).not.toContain(SECRET);
    expect(await hooksOf(fleet)).toEqual([]);
    await runScheduled(createScheduledController({ scheduledTime: Date.now() }), env);
    const [hook] = await hooksOf(fleet);
    expect(hook).toMatchObject({ name: "alerts" });
    expect(await signedWith(fleet, hook.id, SECRET)).toBe(true);
  });

  it("applies a webhook asking for drifts only once D1 took the fleet's watch: refused meanwhile, the cron applies it", async () => {
    const { fleet } = await fleetWithIntent();
    const watch = async () =>
      (await env.DB.prepare("SELECT health_watch AS w FROM fleets WHERE id = ?").bind(fleet).first<{ w: number }>())!.w;
    await env.DB.prepare("UPDATE fleets SET health_watch = 0 WHERE id = ?").bind(fleet).run();
    const spec = clone((await getSpec(fleet)).spec);
    spec.webhooks = { drift: { ...ALERTS, events: ["server.drifted"] } };
    const restore = await breakD1(coordinator(fleet));
    const res = await send("PUT", fleet, spec, { ALERTS_SECRET: SECRET });
    await restore();
    expect(res.status).toBe(200);
    // Not applied while ledgers would still read 0 and keep its drifts home.
    expect(await hooksOf(fleet)).toEqual([]);
    expect(await watch()).toBe(0);
    await runScheduled(createScheduledController({ scheduledTime: Date.now() }), env);
    expect((await hooksOf(fleet)).map((h) => h.name)).toEqual(["drift"]);
    expect(await watch()).toBe(1);
  });

  it("names a webhook added through the API by its id, so its export applies as a no-op", async () => {
    const { fleet } = await fleetWithIntent();
    const created = await call("POST", `/v1/fleets/${fleet}/webhooks`, {
      body: { url: "https://hooks.example.com/b", events: ["server.failed"] },
    });
    const { spec, etag } = await getSpec(fleet);
    expect(Object.keys(spec.webhooks)).toEqual([created.json.webhook.id]);
    const res = await call("PUT", `/v1/fleets/${fleet}/spec?prune=true`, { body: spec, headers: { "If-Match": etag } });
    expect(res.json).toMatchObject({ changed: false });
  });

  it("refuses a spec whose webhooks, with those added through the API it keeps, would exceed the fleet's maximum", async () => {
    const { fleet } = await fleetWithIntent();
    const created = await call("POST", `/v1/fleets/${fleet}/webhooks`, {
      body: { url: "https://hooks.example.com/api", events: ["server.failed"] },
    });
    expect(created.status).toBe(201);
    const { spec, etag } = await getSpec(fleet);
    spec.webhooks = Object.fromEntries(
      Array.from({ length: MAX_WEBHOOKS_PER_FLEET }, (_, i) => [
        `hook${i}`,
        { ...ALERTS, url: `https://hooks.example.com/${i}` },
      ]),
    );
    for (const method of ["POST", "PUT"] as const) {
      const res = await send(method, fleet, spec, { ALERTS_SECRET: SECRET });
      expect(res.status).toBe(422);
      expect(res.json.error.code).toBe("invalid_spec");
      expect(res.json.error.details.problems).toEqual([
        {
          path: "webhooks",
          message: `the fleet would have ${MAX_WEBHOOKS_PER_FLEET + 1} webhooks, and it may have at most ${MAX_WEBHOOKS_PER_FLEET} (1 the spec does not list are kept: list them, or apply with prune to remove them)`,
        },
      ]);
    }
    expect(await hooksOf(fleet)).toHaveLength(1);
    expect((await getSpec(fleet)).etag).toBe(etag);
    // With prune the one added through the API goes, and every webhook of the spec is there.
    const pruned = await send("PUT", fleet, spec, { ALERTS_SECRET: SECRET }, { prune: true });
    expect(pruned.json).toMatchObject({ changed: true, summary: { add: MAX_WEBHOOKS_PER_FLEET, remove: 1 } });
    expect((await hooksOf(fleet)).map((h) => h.name).sort()).toEqual(Object.keys(spec.webhooks).sort());
  });

  it("refuses bad webhooks with every problem and its path, and applies nothing", async () => {
    const { fleet } = await fleetWithIntent();
    const { spec, etag } = await getSpec(fleet);
    const bad = clone(spec);
    bad.webhooks = {
      plain: { url: "http://hooks.example.com/x", events: ["reboot.granted"], secret_ref: { env: "S" } },
      odd: {
        url: "https://hooks.example.com/y",
        events: ["reboot.granted", "reboot.exploded"],
        secret_ref: { env: "S" },
      },
      nosecret: { url: "https://hooks.example.com/z", events: ["server.failed"] },
    };
    bad.roles.edge.agents.push({ name: "ghost" });
    const res = await send("PUT", fleet, bad, { S: SECRET });
    expect(res.status).toBe(422);
    expect(res.json.error.code).toBe("invalid_spec");
    const problems = res.json.error.details.problems as { path: string; message: string }[];
    expect(problems.map((p) => p.path).sort()).toEqual([
      "roles.edge.agents.2.name",
      "webhooks.odd.events.1",
      "webhooks.plain.url",
    ]);
    expect(problems.find((p) => p.path === "webhooks.plain.url")!.message).toMatch(/https/);
    expect(problems.find((p) => p.path === "webhooks.odd.events.1")!.message).toMatch(
      /'reboot.exploded' is not an event/,
    );
    // A schema-valid spec: its plain-HTTP URL alone is still refused, by diff and apply alike.
    const onlyHttp = clone(spec);
    onlyHttp.webhooks = { plain: bad.webhooks.plain };
    for (const method of ["POST", "PUT"] as const) {
      const r = await send(method, fleet, onlyHttp, { S: SECRET });
      expect(r.status).toBe(422);
      expect(r.json.error.details.problems).toEqual([
        { path: "webhooks.plain.url", message: expect.stringMatching(/must be https/) },
      ]);
    }
    // Once the schema holds, a new webhook without a secret is refused too (the diff only notes it).
    const noSecret = clone(spec);
    noSecret.webhooks = { nosecret: bad.webhooks.nosecret, named: { ...ALERTS } };
    const d = await send("POST", fleet, noSecret, null);
    expect(d.json.items.map((i: any) => i.note)).toEqual([
      expect.stringMatching(/no secret sent/),
      expect.stringMatching(/no secret sent/),
    ]);
    const refused = await send("PUT", fleet, noSecret, null);
    expect(refused.status).toBe(422);
    expect(refused.json.error.details.problems).toEqual([
      { path: "webhooks.named.secret_ref", message: expect.stringMatching(/\$ALERTS_SECRET was not sent/) },
      { path: "webhooks.nosecret.secret_ref", message: expect.stringMatching(/needs a signing secret/) },
    ]);
    expect(await hooksOf(fleet)).toEqual([]);
    expect((await getSpec(fleet)).etag).toBe(etag);
  });
});
