/**
 * The fleet's history in the console: the overview's chart of servers by status and an agent's
 * page of versions over time, both SVG the server drew (an image with its title and description,
 * axes labelled), axe clean in light and dark; the CSV download is the API's.
 */
import { accessible, admin, expect, seed, signIn, test, url } from "./fixtures.ts";

const PERIOD_MS = 5 * 60_000;

test.beforeAll(async () => {
  // One cron tick at the start of a period rolls every fleet up (the deployed cron does it by itself).
  const at = Date.now() - (Date.now() % PERIOD_MS) + 1_000;
  const res = await fetch(url(`/__scheduled?cron=${encodeURIComponent("* * * * *")}&time=${at}`));
  expect(res.ok).toBe(true);
  await expect
    .poll(async () => (await admin("GET", `/v1/fleets/${seed.fleet}/history?metric=servers`)).servers.length, {
      timeout: 15_000,
    })
    .toBeGreaterThan(0);
});

test("history: the overview charts servers by status as an accessible SVG, and links each agent's versions", async ({
  page,
}) => {
  await signIn(page);
  const card = page.locator("#overview-history");
  const chart = card.getByRole("img", { name: new RegExp(`Servers of ${seed.fleet} by status`) });
  await expect(chart).toBeVisible();
  await expect(chart.locator("desc")).toContainText(/Last values: realized: \d+/);
  // Axes labelled, a line and a legend entry per status the fleet has.
  await expect(chart.locator("text", { hasText: "time (UTC)" })).toHaveCount(1);
  await expect(chart.locator("text", { hasText: /^servers$/ })).toHaveCount(1);
  expect(await chart.locator("polyline").count()).toBeGreaterThanOrEqual(4);
  await expect(chart.locator("text", { hasText: "never reported" })).toHaveCount(1);
  await accessible(page);

  const csv = await page.request.get(url(`/console/history.csv?fleet=${seed.fleet}&since=30d`));
  expect(csv.headers()["content-type"]).toMatch(/^text\/csv/);
  expect((await csv.text()).split("\r\n")[0]).toBe("at,metric,agent,series,value");

  await card.getByRole("link", { name: "web" }).click();
  await expect(page).toHaveURL(/\/console\/agents\/web\?fleet=/);
  await expect(page.getByRole("heading", { level: 1 })).toContainText("Agent web");
  const versions = page.getByRole("img", { name: /Versions of web in/ });
  await expect(versions).toBeVisible();
  await expect(versions.locator("text", { hasText: "% of servers" })).toHaveCount(1);
  const spread = page.locator("#agent-spread");
  await expect(spread).toContainText("1.4.0");
  await accessible(page);

  await page.getByRole("link", { name: "7d" }).click();
  await expect(page.getByRole("navigation", { name: "Window" }).locator("[aria-current=page]")).toHaveText("7d");
});
