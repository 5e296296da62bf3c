import { accessible, admin, expect, live, seed, signIn, test, url } from "./fixtures.ts";

test.describe.configure({ mode: "serial" });

test("sign in with SSO through a real OpenID provider; an admin sees the session and ends it", async ({
  page,
  browser,
}) => {
  const mapping = await admin("POST", "/v1/sso/mappings", {
    kind: "group",
    value: "sso-ops",
    scope: "write",
    fleets: [seed.fleet],
  });
  try {
    // Ana, in her own browser: the sign-in page offers SSO; the provider's login and consent pages.
    const ana = await (await browser.newContext()).newPage();
    await ana.goto(url("/console/sign-in"));
    await ana.getByRole("link", { name: "Sign in with SSO" }).click();
    await ana.locator('input[name="login"]').fill("ana");
    await ana.locator('input[name="password"]').fill("any");
    await ana.getByRole("button", { name: "Sign-in" }).click();
    await ana.getByRole("button", { name: "Continue" }).click();
    await expect(ana.locator("body")).toHaveAttribute("data-scope", "write");
    await ana.goto(url("/console/me"));
    await expect(ana.locator("#me-via")).toHaveText("your identity provider (OpenID Connect)");
    await expect(ana.locator("#me-fleets")).toHaveText(seed.fleet);
    // Her fleet's overview stays open, live, while the admin ends her session.
    await ana.goto(url(`/console?fleet=${seed.fleet}`));
    await live(ana);

    // The admin's list of sessions shows hers; ending it signs her out.
    await signIn(page, seed.admin, "/console/me");
    await page.locator("#me-sessions").click();
    const row = page.locator("#sso-sessions tr", { hasText: "ana@example.com" });
    await expect(row).toContainText("OpenID Connect");
    await expect(row).toContainText("console");
    await expect(row).toContainText(seed.fleet);
    await accessible(page);
    await row.getByRole("button", { name: "End" }).click();
    await expect(page.locator(".flash.ok")).toContainText("ended");
    await expect(page.locator("#sso-sessions tr", { hasText: "ana@example.com" })).toHaveCount(0);

    // Her open page is told at once (its live socket closes as ended) and goes to sign in by itself.
    await expect(ana).toHaveURL(/\/console\/sign-in\?ended=1/, { timeout: 10_000 });
    await ana.goto(url("/console/me"));
    await expect(ana).toHaveURL(/\/console\/sign-in/);
  } finally {
    await admin("DELETE", `/v1/sso/mappings/${mapping.id}`);
  }
});
