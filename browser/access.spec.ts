import { accessible, admin, expect, seed, signIn, test, url } from "./fixtures.ts";

test.describe.configure({ mode: "serial" });

test("a token limited to one fleet: the header says who, You says what it may do, other fleets are absent", async ({
  page,
}) => {
  const other = `other-${Date.now().toString(36)}`;
  await admin("POST", "/v1/fleets", { id: other });
  const t = await admin("POST", "/v1/tokens", {
    name: "lobby screen",
    scope: "read",
    fleets: [seed.fleet],
    description: "the wall display",
    expires_at: new Date(Date.now() + 3600_000).toISOString(),
  });
  await signIn(page, t.token, `/console?fleet=${seed.fleet}`);
  const who = page.locator("#who");
  await expect(who).toHaveText(/lobby screen · read · 1 fleet/);
  const selector = page.getByLabel("Fleet");
  await expect(selector.locator("option")).toHaveText([seed.fleet]);
  await who.click();
  await expect(page).toHaveURL(/\/console\/me$/);
  await expect(page.locator("#me-via")).toHaveText("an operator token");
  await expect(page.locator("#me-fleets")).toHaveText(seed.fleet);
  await expect(page.locator("#me-may")).toContainText("✕ Change them");
  await expect(page.locator("#me-may")).toContainText("they need a token of every fleet");
  await accessible(page);
  // The other fleet, asked for by name, is answered as one that does not exist.
  await page.goto(url(`/console?fleet=${other}`));
  await expect(page.getByRole("alert")).toContainText(`fleet '${other}' does not exist`);
  await page.goto(url(`/console/servers?fleet=${seed.fleet}`));
  await expect(page.getByRole("button", { name: /decommission|refresh/i })).toHaveCount(0);
});
