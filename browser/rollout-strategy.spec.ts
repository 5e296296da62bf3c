/**
 * The rollout page of a rollout with a strategy, in Chromium: the plan with each step's servers,
 * the analysis values drawn as SVG by the server, why it waits, the targets by hostname and the
 * event log in sentences. Its own fleet, so the seeded pages are left as they are.
 */
import { accessible, admin, expect, signIn, test, url } from "./fixtures.ts";
import { reportOf, sendReport, type Host } from "./seed.ts";

const FLEET = "strategy-eu";
const OLD = "registry.example/api:2.0.0";
const NEW = "registry.example/api:2.1.0";

test("a strategy's rollout: plan, analysis chart, why it waits, targets, readable events", async ({ page }) => {
  await admin("POST", "/v1/fleets", { id: FLEET });
  await admin("PUT", `/v1/fleets/${FLEET}/channels/api`, { image: OLD, version: "2.0.0" });
  await admin("PUT", `/v1/fleets/${FLEET}/roles/api`, { agents: [{ name: "api" }] });
  const hosts: Host[] = [];
  for (let i = 1; i <= 4; i++) {
    const s = await admin("POST", "/v1/servers", {
      fleet: FLEET,
      hostname: `api-0${i}.strategy-eu.example.com`,
      kind: "managed",
      roles: ["api"],
      labels: { zone: i % 2 ? "eu-1a" : "eu-1b" },
    });
    hosts.push({ id: s.id, hostname: s.hostname, token: s.token, fleetlockId: "" });
    await sendReport(url(""), hosts.at(-1)!, reportOf(1, [{ name: "api", image: OLD }]));
  }
  const r = await admin("POST", "/v1/rollouts", {
    fleet: FLEET,
    agent: "api",
    image: NEW,
    version: "2.1.0",
    strategy: {
      steps: [
        { type: "canary", count: 1 },
        { type: "analysis", bake_s: 3600, interval_s: 1, checks: [{ kind: "realized" }] },
        { type: "wave", percent: 100, by: "zone" },
      ],
    },
  });
  // The canary (api-01, first by hostname) realizes the new image.
  const desired = await admin("GET", `/v1/servers/${hosts[0].id}/desired`);
  await sendReport(url(""), hosts[0], reportOf(desired.generation, [{ name: "api", image: NEW }]));

  await signIn(page, undefined, `/console/rollouts/${r.id}?fleet=${FLEET}`);
  // Samples are taken every second from the rollout's alarm: a few points on the chart.
  await expect(async () => {
    await page.reload();
    expect(await page.locator("#rollout-analysis svg circle").count()).toBeGreaterThanOrEqual(3);
  }).toPass({ timeout: 15_000 });
  await expect(page.locator("#rollout-analysis svg polyline")).toHaveCount(1);
  await expect(page.locator("#rollout-plan")).toContainText("canary 1");
  await expect(page.locator("#rollout-plan")).toContainText("api-01.strategy-eu.example.com");
  await expect(page.locator("#rollout-plan")).toContainText("wave 100 % (zone=eu-1b)");
  await expect(page.locator("#rollout-waits")).toContainText("analysis (step 1) holds");
  await expect(page.locator("#rollout-targets")).toContainText("api-04.strategy-eu.example.com");
  const events = page.locator("#rollout-events");
  await expect(events).toContainText("Step 0 started: canary 1");
  await expect(events).toContainText("realized the image");
  await expect(events).not.toContainText("{");
  await accessible(page);
  await page.screenshot({ path: "/tmp/x/rollout-strategy.png", fullPage: true });
});

test("a fleet spec's default strategy: listed on the rollouts page, named on the rollout it drives", async ({
  page,
}) => {
  const fleet = "strategy-defaults";
  await admin("POST", "/v1/fleets", { id: fleet });
  await admin("PUT", `/v1/fleets/${fleet}/spec`, {
    apiVersion: "harbormaster/v1",
    kind: "FleetSpec",
    fleet,
    channels: {
      api: {
        image: OLD,
        version: "2.0.0",
        rollout: { strategy: { steps: [{ type: "canary", count: 1 }, { type: "pause" }], auto_rollback: true } },
      },
    },
    roles: { api: { agents: [{ name: "api" }] } },
  });
  for (let i = 1; i <= 2; i++) {
    const s = await admin("POST", "/v1/servers", {
      fleet,
      hostname: `api-0${i}.${fleet}.example.com`,
      kind: "managed",
      roles: ["api"],
    });
    await sendReport(
      url(""),
      { id: s.id, hostname: s.hostname, token: s.token, fleetlockId: "" },
      reportOf(1, [{ name: "api", image: OLD }]),
    );
  }
  // Started without a strategy: the fleet's default drives it.
  const r = await admin("POST", "/v1/rollouts", { fleet, agent: "api", image: NEW, version: "2.1.0" });

  await signIn(page, undefined, `/console/rollouts?fleet=${fleet}`);
  const defaults = page.locator("#rollout-defaults");
  await expect(defaults.getByRole("row", { name: /api canary 1 → pause until resumed yes/ })).toBeVisible();
  await accessible(page);
  await page.goto(url(`/console/rollouts/${r.id}?fleet=${fleet}`));
  await expect(page.locator("dl.kv")).toContainText("the fleet's default for api (its spec's channels.api.rollout)");
  await expect(page.locator("#rollout-plan")).toContainText("canary 1");
});
