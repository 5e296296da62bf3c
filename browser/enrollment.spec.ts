import { accessible, admin, audited, expect, seed, signIn, test, url } from "./fixtures.ts";

test.describe.configure({ mode: "serial" });

const fleetQ = `?fleet=${seed?.fleet}`;

test("enrollment tokens: linked from the fleet's overview, created with the token shown once, listed without it, revoked", async ({
  page,
}) => {
  await signIn(page);
  await page.getByRole("link", { name: "Enrollment tokens" }).click();
  await expect(page).toHaveURL(/\/console\/enrollment\?fleet=/);
  await expect(page.getByRole("heading", { level: 1 })).toContainText(seed.fleet);

  const form = page.getByRole("form", { name: "Create an enrollment token" });
  await form.getByLabel("Name", { exact: true }).fill("rack 7");
  await form.getByLabel("Machines it may enroll").fill("3");
  await form.getByLabel("Roles").fill("web");
  await form.getByLabel("Hostname pattern").fill("web-*.example.com");
  await form.getByRole("button", { name: "Create token" }).click();

  const shown = page.locator("#token-value");
  await expect(shown).toHaveText(/^hme\.[0-9a-f-]{36}\.[A-Za-z0-9_-]{43}$/);
  const token = (await shown.textContent())!;
  await expect(page.locator("#new-token")).toContainText(`install.sh | sudo sh -s -- --token ${token}`);
  const row = page.locator("#enrollment-tokens tr", { hasText: "rack 7" });
  await expect(row).toContainText("0/3");
  await expect(row).toContainText("active");
  await accessible(page);

  // The token works, and is never shown again: not on a reload, not in the list.
  const enrolled = await fetch(url("/v1/agent/enroll"), {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ hostname: "web-77.example.com", machine_id: "browser-test-machine", boot_id: "b" }),
  });
  expect(enrolled.status).toBe(201);
  await page.goto(url(`/console/enrollment${fleetQ}`));
  await expect(page.locator("#token-value")).toHaveCount(0);
  expect(await page.content()).not.toContain(token.split(".")[2]);
  await expect(row).toContainText("1/3");

  await row.getByRole("button", { name: "Revoke" }).click();
  await expect(page.locator(".flash.ok")).toContainText("revoked");
  await expect(row).toContainText("revoked");
  const id = token.split(".")[1];
  await audited("enrollment_token.revoke", `enrollment-token:${id}`);
  const list = await admin("GET", `/v1/fleets/${seed.fleet}/enrollment-tokens`);
  expect(list.items.find((t: any) => t.id === id).state).toBe("revoked");
});

test("enrollment tokens: a bad pattern is refused with the API's reason; a read token sees the list but no form", async ({
  page,
}) => {
  await signIn(page, seed.admin, `/console/enrollment${fleetQ}`);
  const form = page.getByRole("form", { name: "Create an enrollment token" });
  await form.getByLabel("Hostname pattern").fill("web-[0-9]");
  await form.getByRole("button", { name: "Create token" }).click();
  await expect(page.getByRole("alert")).toContainText("hostname_pattern");
  await expect(page.locator("#token-value")).toHaveCount(0);

  await page.context().clearCookies();
  await signIn(page, seed.readToken, `/console/enrollment${fleetQ}`);
  await expect(page.locator("#enrollment-tokens")).toBeVisible();
  await expect(page.getByRole("form", { name: "Create an enrollment token" })).toHaveCount(0);
  await expect(page.getByRole("button", { name: "Revoke" })).toHaveCount(0);
});

test("enrollment tokens: the answer reloaded sends the form again and shows the same token, its secret issued anew", async ({
  page,
}) => {
  await signIn(page, seed.admin, `/console/enrollment${fleetQ}`);
  const form = page.getByRole("form", { name: "Create an enrollment token" });
  await form.getByLabel("Name", { exact: true }).fill("sent twice");
  await form.getByRole("button", { name: "Create token" }).click();
  const shown = page.locator("#token-value");
  await expect(shown).toHaveText(/^hme\./);
  const first = (await shown.textContent())!.trim();
  await expect(page.locator("#token-replayed")).toHaveCount(0);

  // Reloading the page the POST answered sends the same form, with the same key.
  await page.reload();
  await expect(page.locator("#token-replayed")).toContainText("no longer works");
  const again = (await shown.textContent())!.trim();
  expect(again.split(".")[1]).toBe(first.split(".")[1]);
  expect(again).not.toBe(first);
  await expect(page.locator("#enrollment-tokens tr", { hasText: "sent twice" })).toHaveCount(1);
  await accessible(page);
});
