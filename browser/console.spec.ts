import {
  accessible,
  admin,
  audited,
  expect,
  live,
  markDocument,
  notReloaded,
  screenshots,
  seed,
  signIn,
  test,
  url,
} from "./fixtures.ts";
import { NEW, reportOf, EXPORTER } from "./seed.ts";

test.describe.configure({ mode: "serial" });

const host = (name: string) => seed.hosts[name];
const fleetQ = `?fleet=${seed?.fleet}`;

test("sign-in page: a labelled form, no session yet", async ({ page }) => {
  await page.goto(url("/"));
  await expect(page).toHaveURL(/\/console\/sign-in/);
  await expect(page.getByLabel("Operator token")).toBeVisible();
  await accessible(page);
  await page.getByLabel("Operator token").fill("not-a-token");
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("alert")).toContainText("not accepted");
});

test("overview: servers by status, drift, reboot groups, the running rollout, data version", async ({ page }) => {
  await signIn(page);
  await expect(page.getByRole("heading", { level: 1 })).toContainText(seed.fleet);
  const count = (k: string) => page.locator(`[data-count="${k}"]`);
  await expect(count("realized")).toHaveText("3");
  await expect(count("pending")).toHaveText("1");
  await expect(count("failed")).toHaveText("1");
  await expect(count("drifted")).toHaveText("1");
  await expect(count("stale")).toHaveText("1");
  await expect(count("unknown")).toHaveText("2");
  await expect(count("decommissioning")).toHaveText("1");
  await expect(count("drift")).toHaveText("2");
  const group = page.locator("#overview-groups tr", { hasText: "night" });
  await expect(group).toContainText("1/1");
  await expect(group.locator("td").nth(3)).toHaveText("1");
  await expect(page.locator("#overview-rollouts")).toContainText(NEW);
  await expect(page.locator("#overview-rollouts progress").first()).toBeVisible();
  await expect(page.getByText(/Version \d+ of \d+/)).toBeVisible();
  await expect(page.locator("time[title]").first()).toHaveAttribute("title", /UTC$/);
  await accessible(page);
  await screenshots(page, "overview");
});

test("a live change appears on an open page within 2 s, without a reload", async ({ page }) => {
  await signIn(page);
  await live(page);
  await markDocument(page);
  const before = Number(await page.locator('[data-count="unknown"]').textContent());
  await admin("POST", "/v1/servers", {
    fleet: seed.fleet,
    hostname: "new-01.prod-eu.example.com",
    kind: "managed",
    roles: ["db"],
  });
  await expect(page.locator('[data-count="unknown"]')).toHaveText(String(before + 1), { timeout: 2_000 });
  await notReloaded(page);
});

test("servers: search by status, hostname, agent and image; paged", async ({ page }) => {
  await signIn(page, seed.admin, `/console/servers${fleetQ}`);
  await expect(page.locator("#servers tbody tr")).toHaveCount(10);
  await page.getByLabel("Status").selectOption("failed");
  await page.getByRole("button", { name: "Search" }).click();
  await expect(page.locator("#servers tbody tr")).toHaveCount(1);
  await expect(page.locator("#servers")).toContainText("app-04");
  await page.goto(url(`/console/servers${fleetQ}&hostname=app-0`));
  await expect(page.locator("#servers tbody tr")).toHaveCount(8);
  await page.goto(url(`/console/servers${fleetQ}&agent=web&image=${encodeURIComponent("registry.example/web:1.3.9")}`));
  await expect(page.locator("#instances tbody tr")).toHaveCount(1);
  await expect(page.locator("#instances")).toContainText("drifted");
  await accessible(page);
});

test("servers: filtered by labels (several ANDed, or a bare key), shown in their own column", async ({ page }) => {
  await admin("PATCH", `/v1/servers/${host("app-01").id}`, { labels: { zone: "eu-1a", rack: "r1" } });
  await admin("PATCH", `/v1/servers/${host("app-02").id}`, { labels: { zone: "eu-1a", rack: "r2" } });
  await admin("PATCH", `/v1/servers/${host("app-03").id}`, { labels: { zone: "eu-1b" } });
  await signIn(page, seed.admin, `/console/servers${fleetQ}`);
  await expect(page.locator("#servers thead")).toContainText("Labels");
  await page.getByLabel("Labels").fill("zone=eu-1a");
  await page.getByRole("button", { name: "Search" }).click();
  await expect(page.locator("#servers tbody tr")).toHaveCount(2);
  await expect(page.locator("#servers tbody tr", { hasText: "app-01" }).locator("td.labels")).toContainText("rack=r1");
  await expect(page.locator("#servers tbody tr", { hasText: "app-01" }).locator("td.labels")).toContainText(
    "zone=eu-1a",
  );
  await page.getByLabel("Labels").fill("zone=eu-1a, rack=r2");
  await page.getByRole("button", { name: "Search" }).click();
  await expect(page.locator("#servers tbody tr")).toHaveCount(1);
  await expect(page.locator("#servers")).toContainText("app-02");
  await page.getByLabel("Labels").fill("zone");
  await page.getByRole("button", { name: "Search" }).click();
  await expect(page.locator("#servers tbody tr")).toHaveCount(3);
  await expect(page.getByLabel("Labels")).toHaveValue("zone");
  await accessible(page);
  // Labels are undone so later tests see the seed as it was.
  for (const h of ["app-01", "app-02", "app-03"])
    await admin("PATCH", `/v1/servers/${host(h).id}`, { labels: { zone: null, rack: null } });
});

test("a server: desired against reported with errors, FleetLock hold, audit; refresh and token rotation, audited", async ({
  page,
}) => {
  await signIn(page, seed.admin, `/console/servers/${host("app-04").id}`);
  await expect(page.locator("#server-agents")).toContainText("manifest unknown");
  await expect(page.locator("#server-agents")).toContainText("failed");
  await page.goto(url(`/console/servers/${host("app-03").id}`));
  await expect(page.locator("#server-facts")).toContainText("holds a slot");
  await expect(page.locator("#server-facts")).toContainText(host("app-03").fleetlockId);
  await expect(page.locator("#server-audit")).toContainText("server.register");
  await accessible(page);
  await screenshots(page, "server");

  await page.getByRole("button", { name: "Ask for a report now" }).click();
  await expect(page.locator(".flash.ok")).toContainText("report was asked for");
  await audited("server.refresh", `server:${host("app-03").id}`);

  await page.getByRole("button", { name: "Rotate its token" }).click();
  const token = (await page.locator("#new-token").textContent())!.trim();
  expect(token).toMatch(/^hms\./);
  host("app-03").token = token;
  await audited("server.token.rotate", `server:${host("app-03").id}`);
});

test("decommission needs the hostname typed; cancel brings the server back; both audited", async ({ page }) => {
  const s = host("app-06");
  await signIn(page, seed.admin, `/console/servers/${s.id}`);
  await page.getByLabel("Type the hostname to decommission").fill("app-06");
  await page.getByRole("button", { name: "Decommission" }).click();
  // The browser refuses the form (pattern): nothing was sent.
  await expect(page.locator(".flash")).toHaveCount(0);
  expect((await admin("GET", `/v1/servers/${s.id}`)).state).not.toBe("decommissioning");
  await page.getByLabel("Type the hostname to decommission").fill(s.hostname);
  await page.getByRole("button", { name: "Decommission" }).click();
  await expect(page.locator(".flash.ok")).toContainText("is decommissioning");
  await audited("server.decommission", `server:${s.id}`);
  await page.getByRole("button", { name: "Cancel the decommission" }).click();
  await expect(page.locator(".flash.ok")).toContainText("cancelled");
  await audited("server.decommission.cancel", `server:${s.id}`);
  expect((await admin("GET", `/v1/servers/${s.id}`)).state).not.toBe("decommissioning");
});

test("a reboot group: holder, queue in order; pause and resume, resize, force-release with confirmation; audited", async ({
  page,
}) => {
  await signIn(page, seed.admin, `/console/groups${fleetQ}`);
  await expect(page.locator("#groups")).toContainText("night");
  await accessible(page);
  await page.getByRole("link", { name: "night" }).click();
  await expect(page.locator("#group-detail")).toContainText(host("app-03").fleetlockId);
  await expect(page.getByRole("list", { name: "Queue" })).toContainText(host("db-01").fleetlockId);
  await accessible(page);
  await screenshots(page, "reboot-group");

  await page.getByRole("button", { name: "Pause: admit no one new" }).click();
  await expect(page.locator("h1")).toContainText("paused");
  await page.getByRole("button", { name: "Resume: admit again" }).click();
  await expect(page.locator("h1")).toContainText("admitting");
  await audited("reboot_group.put", `fleet:${seed.fleet}`);

  // Force-release: the id must be typed.
  const row = page.locator("#group-detail tr", { hasText: host("app-03").fleetlockId });
  await row.getByLabel("Type the id to confirm").fill("wrong");
  await row.getByRole("button", { name: "Release" }).click();
  await expect(page.locator(".flash.bad")).toContainText("Not done");
  await page
    .locator("#group-detail tr", { hasText: host("app-03").fleetlockId })
    .getByLabel("Type the id to confirm")
    .fill(host("app-03").fleetlockId);
  await page
    .locator("#group-detail tr", { hasText: host("app-03").fleetlockId })
    .getByRole("button", { name: "Release" })
    .click();
  await expect(page.locator(".flash.ok")).toContainText("released");
  await audited("reboot_group.force_release", `fleet:${seed.fleet}`);
  // The freed slot went to the queued host, first in line.
  await expect(page.locator("#group-detail")).toContainText(host("db-01").fleetlockId);
  await expect(page.getByText("Nobody is waiting.")).toBeVisible();

  await page.getByRole("spinbutton", { name: "Slots" }).fill("2");
  await page.getByRole("button", { name: "Resize" }).click();
  await expect(page.locator(".flash.ok")).toContainText("2 slot(s)");
});

test("a rollout: a bar per state, live progress, pause and resume, audited", async ({ page }) => {
  await signIn(page, seed.admin, `/console/rollouts${fleetQ}`);
  await expect(page.locator("#rollouts")).toContainText(NEW);
  await accessible(page);
  await page.goto(url(`/console/rollouts/${seed.rollout}`));
  await expect(page.locator("#rollout-progress progress")).toHaveCount(7);
  await expect(page.locator("#rollout-progress")).toContainText("applying");
  await accessible(page);
  await screenshots(page, "rollout");

  // The applying host (app-01, first by hostname) realizes the new image: the page moves on its own.
  await live(page);
  await markDocument(page);
  const desired = await admin("GET", `/v1/servers/${host("app-01").id}/desired`);
  seed.reports["app-01"] = reportOf(desired.generation, [
    { name: "web", image: NEW },
    { name: "exporter", image: EXPORTER },
  ]);
  await (await import("./seed.ts")).sendReport(seed.url, host("app-01"), seed.reports["app-01"]);
  await expect(page.getByLabel(/^done: 1 of/)).toBeVisible({ timeout: 2_500 });
  await notReloaded(page);

  await page.getByRole("button", { name: "Pause" }).click();
  await expect(page.locator("h1")).toContainText("paused");
  await audited("rollout.pause", `rollout:${seed.rollout}`);
  await page.getByRole("button", { name: "Resume" }).click();
  await expect(page.locator("h1")).toContainText("running");
  await audited("rollout.resume", `rollout:${seed.rollout}`);
});

test("drift: findings with reasons; a dry run changes nothing, then the fix, audited", async ({ page }) => {
  await signIn(page, seed.admin, `/console/drift${fleetQ}`);
  await expect(page.locator("#drift-findings")).toContainText("app-04");
  await expect(page.locator("#drift-findings")).toContainText("image mismatch");
  await accessible(page);
  await page.getByRole("button", { name: "Dry-run the fix for this page" }).click();
  await expect(page.locator("#drift-plan")).toContainText("app-05");
  await accessible(page);
  await page.getByRole("button", { name: "Apply the fix" }).click();
  await expect(page.locator(".flash.ok")).toContainText("fix applied");
  await audited("check.fix");
});

test("audit: filtered by action, actor and server", async ({ page }) => {
  await signIn(page, seed.admin, `/console/audit${fleetQ}&action=server.refresh`);
  await expect(page.locator("#audit tbody tr").first()).toContainText("server.refresh");
  await page.goto(url(`/console/audit${fleetQ}&server=${host("app-06").id}`));
  await expect(page.locator("#audit")).toContainText("server.decommission.cancel");
  await page.goto(url(`/console/audit${fleetQ}&actor=token:bootstrap&action=reboot_group`));
  await expect(page.locator("#audit tbody tr").first()).toContainText("reboot_group");
  await accessible(page);
});

test("a read token sees everything and no action; the API refuses it anyway", async ({ page }) => {
  await signIn(page, seed.readToken);
  await expect(page.locator('[data-count="realized"]')).toBeVisible();
  for (const path of [
    `/console/servers/${host("app-02").id}`,
    `/console/groups/night${fleetQ}`,
    `/console/rollouts/${seed.rollout}`,
    `/console/drift${fleetQ}`,
  ]) {
    await page.goto(url(path));
    await expect(page.locator("main h1")).toBeVisible();
    await expect(page.locator("main form[method=post]")).toHaveCount(0);
  }
  const csrf = await page.locator("body").getAttribute("data-csrf");
  const res = await page.request.post(url(`/console/servers/${host("app-02").id}/refresh`), {
    form: { _csrf: csrf!, back: `/console/servers/${host("app-02").id}` },
    headers: { Origin: seed.url },
  });
  expect(await res.text()).toContain("needs a token with scope");
});

test("forged actions are refused: no CSRF token, a wrong one, another origin", async ({ page }) => {
  await signIn(page, seed.writeToken);
  const csrf = (await page.locator("body").getAttribute("data-csrf"))!;
  const target = url(`/console/servers/${host("app-02").id}/refresh`);
  const attempts = [
    await page.request.post(target, { form: { back: "/console" }, headers: { Origin: seed.url } }),
    await page.request.post(target, { form: { _csrf: "x".repeat(csrf.length) }, headers: { Origin: seed.url } }),
    await page.request.post(target, { form: { _csrf: csrf }, headers: { Origin: "https://evil.example" } }),
    await page.request.post(target, { form: { _csrf: csrf } }),
  ];
  expect(attempts.map((r) => r.status())).toEqual([403, 403, 403, 403]);
  // A page from elsewhere cannot open the live socket either.
  const socket = await page.request.get(url(`/console/live${fleetQ}`), {
    headers: {
      Upgrade: "websocket",
      Origin: "https://evil.example",
      Connection: "Upgrade",
      "Sec-WebSocket-Version": "13",
      "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    },
  });
  expect(socket.status()).toBe(403);
});

test("images: the catalog with name, version, digest, size and who uses each image, linked from the nav", async ({
  page,
}) => {
  const digest = `sha256:${"e".repeat(64)}`;
  const image = await admin("POST", "/v1/images", {
    name: "catalog-demo",
    version: "3.1.0",
    kind: "oci-ref",
    digest,
    size: 52_428_800,
    ref: `registry.example.com/org/catalog-demo@${digest}`,
  });
  await admin("PUT", `/v1/fleets/${seed.fleet}/channels/catalog-demo`, { image_id: image.id });
  await signIn(page);
  await page.getByRole("navigation", { name: "Console" }).getByRole("link", { name: "Images" }).click();
  await expect(page).toHaveURL(/\/console\/images/);
  await expect(page.getByRole("heading", { level: 1 })).toHaveText("Images");
  const row = page.locator("#images tbody tr", { hasText: "catalog-demo" });
  await expect(row).toContainText("3.1.0");
  await expect(row).toContainText("oci-ref");
  await expect(row).toContainText("sha256:eeeeeeeeeeee");
  await expect(row).toContainText("50.0 MiB");
  await expect(row).toContainText(`channel ${seed.fleet}/catalog-demo`);
  await page.getByLabel("Name").fill("no-such-image");
  await page.getByRole("button", { name: "Filter" }).click();
  await expect(page.locator("#images tbody tr")).toHaveCount(0);
  await expect(page.getByText("No image named no-such-image")).toBeVisible();
  await accessible(page);
});

test("usable at 390 px: the overview fits the width", async ({ page }) => {
  await page.setViewportSize({ width: 390, height: 844 });
  await signIn(page);
  const overflow = await page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth");
  expect(overflow).toBeLessThanOrEqual(0);
  await screenshots(page, "overview-390");
  await page.keyboard.press("Tab");
  await expect(page.getByRole("link", { name: "Skip to content" })).toBeFocused();
});

test("sign-out ends the session", async ({ page }) => {
  await signIn(page);
  await page.getByRole("button", { name: "Sign out" }).click();
  await expect(page).toHaveURL(/\/console\/sign-in\?signed_out=1/);
  await page.goto(url("/console"));
  await expect(page).toHaveURL(/\/console\/sign-in/);
});
