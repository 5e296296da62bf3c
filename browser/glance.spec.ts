/**
 * The console at a glance: the all-fleets page, the overview naming its troubled servers, exact
 * last-report times, hostnames in URLs, HTML error pages, the readable audit log, natural order,
 * images and versions, drawn icons, 390 px, and the rollout's timing text. Runs after
 * console.spec.ts, whose tests expect one fleet: the first test here still sees one, then
 * `ops-eu` (a fleet in trouble) and `staging-us` join.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { HostApi } from "../agent/host-api.ts";
import { accessible, admin, expect, screenshots, seed, signIn, test, url } from "./fixtures.ts";
import { api, NEW, OLD, reportOf, sendReport, type Host } from "./seed.ts";

// Not serial: a failing test does not skip the others. Each test that needs the second fleet makes
// sure it exists (ensureStaging), so a worker restarted after a failure finds it again.
const STAGING = "staging-us";
const host = (name: string) => seed.hosts[name];
/** The staging hosts, registered in an order the index would sort as sim-1, sim-10, sim-2. */
const SIMS = ["sim-2", "sim-10", "sim-1"];
const staging: Record<string, Host> = {};

const OPS = "ops-eu";
const opsHosts: Record<string, Host> = {};
const STALE = ["s-1", "s-2", "s-3", "s-4", "s-10", "s-11"];
const opsFailed = () =>
  reportOf(1, [], [{ agent: "web", op: "install", message: "pull registry.example/web:1.4.0: manifest unknown" }]);
const opsDrifted = () => reportOf(1, [{ name: "web", image: "registry.example/web:1.3.9" }]);

/**
 * A fleet in trouble, `ops-eu` (stale-after 10 s): f-1 failed, d-1 drifted, six hosts gone stale.
 * Made once (10 s and more: the stale ones must fall silent); f-1 and d-1 report at every call.
 */
async function ensureOps() {
  if (!opsHosts["f-1"]) {
    const fleets = await admin("GET", "/v1/fleets");
    if (fleets.items.some((f: { id: string }) => f.id === OPS)) {
      for (const name of ["f-1", "d-1"]) {
        const s = await admin("GET", `/v1/servers/${name}?fleet=${OPS}`);
        const { token } = await admin("POST", `/v1/servers/${s.id}/token`);
        opsHosts[name] = { id: s.id, hostname: s.hostname, token, fleetlockId: "" };
      }
    } else {
      await admin("POST", "/v1/fleets", { id: OPS, stale_after_s: 10 });
      await admin("PUT", `/v1/fleets/${OPS}/channels/web`, { image: OLD, version: "1.4.0" });
      await admin("PUT", `/v1/fleets/${OPS}/roles/web`, { agents: [{ name: "web" }] });
      for (const name of ["f-1", "d-1", ...STALE]) {
        const s = await admin("POST", "/v1/servers", { fleet: OPS, hostname: name, roles: ["web"] });
        opsHosts[name] = { id: s.id, hostname: s.hostname, token: s.token, fleetlockId: "" };
        if (STALE.includes(name))
          await sendReport(seed.url, opsHosts[name], reportOf(1, [{ name: "web", image: OLD }]));
      }
      // Each ledger's quiet watch tells the index when its host turned stale (10 s after its report).
      await expect
        .poll(async () => (await admin("GET", `/v1/fleets/${OPS}/summary`)).servers.by_status.stale, {
          timeout: 40_000,
          intervals: [2000],
        })
        .toBe(STALE.length);
    }
  }
  await sendReport(seed.url, opsHosts["f-1"], opsFailed());
  await sendReport(seed.url, opsHosts["d-1"], opsDrifted());
}

/**
 * The second fleet, `staging-us` (stale-after 600 s, a paused reboot group, three hosts at OLD):
 * made once; a new worker process takes its hosts over by rotating their tokens.
 */
async function ensureStaging() {
  if (Object.keys(staging).length === SIMS.length) return;
  const fleets = await admin("GET", "/v1/fleets");
  if (!fleets.items.some((f: { id: string }) => f.id === STAGING)) {
    await admin("POST", "/v1/fleets", { id: STAGING, stale_after_s: 600 });
    await admin("PUT", `/v1/fleets/${STAGING}/channels/web`, { image: OLD, version: "1.4.0" });
    await admin("PUT", `/v1/fleets/${STAGING}/roles/web`, { agents: [{ name: "web" }] });
    await admin("PUT", `/v1/fleets/${STAGING}/reboot-groups/canary`, { slots: 1, paused: true });
    for (const name of SIMS) {
      const s = await admin("POST", "/v1/servers", { fleet: STAGING, hostname: name, roles: ["web"] });
      staging[name] = { id: s.id, hostname: s.hostname, token: s.token, fleetlockId: "" };
      await sendReport(seed.url, staging[name], reportOf(1, [{ name: "web", image: OLD }]));
    }
    return;
  }
  for (const name of SIMS) {
    const s = await admin("GET", `/v1/servers/${name}?fleet=${STAGING}`);
    const { token } = await admin("POST", `/v1/servers/${s.id}/token`);
    staging[name] = { id: s.id, hostname: s.hostname, token, fleetlockId: "" };
  }
}

/**
 * A token that may see only `fleets`: other spec files create fleets of their own on the same
 * server, so what a person with these fleets sees is asked with a token limited to them.
 */
async function tokenFor(fleets: string[]) {
  const t = await admin("POST", "/v1/tokens", { name: `glance ${fleets.join(",")}`, scope: "admin", fleets });
  return t.token as string;
}

test("with one fleet, sign-in lands on its overview", async ({ page }) => {
  const token = await tokenFor([seed.fleet]);
  const fleets = await api(seed.url, token)("GET", "/v1/fleets");
  expect(fleets.items.map((f: { id: string }) => f.id)).toEqual([seed.fleet]);
  await signIn(page, token, "/console");
  await expect(page).toHaveURL(/\/console$/);
  await expect(page.getByRole("heading", { level: 1 })).toContainText(seed.fleet);
});

test("the overview names the first failed, stale and drifting servers, linked by hostname, then links to all", async ({
  page,
}) => {
  await ensureOps();
  await signIn(page, seed.admin, `/console?fleet=${OPS}`);
  const named = (status: string) => page.locator(`[data-named="${status}"]`);
  await expect(named("failed").getByRole("listitem")).toHaveText([/^f-1 /]);
  await expect(named("drifted").getByRole("listitem")).toHaveText([/^d-1 /]);
  // Six stale: the first five by name, in natural order, then a link to the filtered list.
  await expect(named("stale").getByRole("listitem")).toHaveText([/^s-1 /, /^s-2 /, /^s-3 /, /^s-4 /, /^s-10 /]);
  await expect(named("stale").getByRole("link", { name: "All 6 stale servers" })).toHaveAttribute(
    "href",
    `/console/servers?fleet=${OPS}&status=stale`,
  );
  // Each name carries its last report, read from the server's ledger.
  await expect(named("failed").locator("time[data-exact]")).toHaveCount(1);
  const link = named("failed").getByRole("link", { name: "f-1" });
  await expect(link).toHaveAttribute("href", `/console/servers/f-1?fleet=${OPS}`);
  await accessible(page);
  await link.click();
  await expect(page).toHaveURL(new RegExp(`/console/servers/f-1\\?fleet=${OPS}$`));
  await expect(page.getByRole("heading", { level: 1 })).toContainText("f-1");
  await expect(page.locator("#server-agents")).toContainText("manifest unknown");
});

test("several fleets: sign-in lands on all fleets, one row each with servers, groups, rollouts, last change", async ({
  page,
}) => {
  const call = admin;
  await ensureStaging();
  await ensureOps();
  // The index answers in the order people count in (its natural sort key), not text order.
  const index = await call("GET", `/v1/servers?fleet=${STAGING}`);
  expect(index.items.map((s: { hostname: string }) => s.hostname)).toEqual(["sim-1", "sim-2", "sim-10"]);

  await signIn(page, await tokenFor([OPS, seed.fleet, STAGING]), "/console");
  await expect(page).toHaveURL(/\/console\/fleets$/);
  await expect(page.getByRole("heading", { level: 1 })).toHaveText("All fleets");
  const rows = page.locator("#fleets tbody tr");
  await expect(rows.locator("th")).toHaveText([OPS, seed.fleet, STAGING]);
  const ops = page.locator(`#fleets tr[data-fleet="${OPS}"]`);
  await expect(ops.locator('[data-count="total"]')).toHaveText("8");
  await expect(ops.locator('[data-status-count="failed"]')).toContainText("1 failed");
  await expect(ops.locator('[data-status-count="stale"]')).toContainText("6 stale");
  await expect(ops.locator('[data-status-count="drifted"]')).toContainText("1 drifted");
  await expect(ops.locator('[data-status-count="stale"]')).toHaveAttribute(
    "href",
    `/console/servers?fleet=${OPS}&status=stale`,
  );
  // console.spec.ts changed the seeded fleet's group and rollout: expect what they are now.
  const prod = page.locator(`#fleets tr[data-fleet="${seed.fleet}"]`);
  const night = await call("GET", `/v1/fleets/${seed.fleet}/reboot-groups/night`);
  const groups = prod.locator("[data-groups]");
  await expect(groups).toContainText("1 group");
  if (night.paused) await expect(groups).toContainText("night paused");
  if (night.holders.length || night.queue.length)
    await expect(groups).toContainText(
      `night: ${night.holders.length}/${night.slots} rebooting${night.queue.length ? `, ${night.queue.length} queued` : ""}`,
    );
  else if (!night.paused) await expect(groups).toContainText("all idle");
  const rollout = await call("GET", `/v1/rollouts/${seed.rollout}`);
  if (["running", "paused", "rolling_back"].includes(rollout.state))
    await expect(prod.locator("[data-rollouts]")).toContainText("web → 1.5.0");
  else await expect(prod.locator("[data-rollouts]")).toContainText("none");
  await expect(prod.locator("[data-last-change] time")).toHaveAttribute("datetime", /Z$/);
  const stag = page.locator(`#fleets tr[data-fleet="${STAGING}"]`);
  await expect(stag.locator('[data-count="total"]')).toHaveText("3");
  await expect(stag.locator("[data-groups]")).toContainText("canary paused");
  await expect(stag.locator("[data-last-change] time")).toHaveAttribute("datetime", /Z$/);
  await accessible(page);
  await screenshots(page, "fleets");
  await stag.getByRole("link", { name: STAGING }).click();
  await expect(page.getByRole("heading", { level: 1 })).toContainText(STAGING);
});

test("icons are drawn, never a font's glyph: the paused badge renders without special fonts", async ({ page }) => {
  await ensureStaging();
  await signIn(page, seed.admin, "/console/fleets");
  const paused = page.locator('#fleets .badge[data-status="paused"]').first();
  const icon = paused.locator("svg.icon");
  await expect(icon).toBeVisible();
  const box = await icon.boundingBox();
  expect(box!.width).toBeGreaterThan(8);
  expect(await page.content()).not.toContain("⏸");
  await expect(page.locator(".badge .i")).toHaveCount(0);
  // The favicon: linked from every page, and /favicon.ico leads to it.
  const href = await page.locator('link[rel="icon"]').getAttribute("href");
  const icoRes = await page.request.get(url("/favicon.ico"));
  expect(icoRes.status()).toBe(200);
  expect(icoRes.url()).toBe(url(href!));
  expect(icoRes.headers()["content-type"]).toBe("image/svg+xml");
});

test("server lists: natural order of hostnames and each agent's version, desired when it differs", async ({ page }) => {
  await ensureStaging();
  await signIn(page, seed.admin, `/console/servers?fleet=${STAGING}`);
  await expect(page.locator("#servers tbody tr td:first-child")).toHaveText(["sim-1", "sim-2", "sim-10"]);
  await expect(page.locator("#servers tbody tr").first()).toContainText("web 1.4.0");
  await page.goto(url(`/console/servers?fleet=${seed.fleet}&hostname=app-05`));
  // app-05 runs 1.3.9 where it should run 1.4.0.
  await expect(page.locator("#servers tbody tr")).toContainText("web 1.3.9 → 1.4.0");
  await accessible(page);
});

test("exact last report times: the list shows the ledger's time, not the index's minutes-old one", async ({ page }) => {
  await ensureStaging();
  const sim = staging["sim-1"];
  await sleep(6000);
  // The same report again: the ledger takes the new time; the index (written on change, refreshed
  // every few minutes at a 600 s stale-after) keeps the older one.
  await sendReport(seed.url, sim, reportOf(1, [{ name: "web", image: OLD }]));
  const ledger = await admin("GET", `/v1/servers/${sim.id}`);
  const index = (await admin("GET", `/v1/servers?fleet=${STAGING}&hostname=sim-1`)).items[0];
  expect(Date.parse(ledger.last_seen) - Date.parse(index.last_seen)).toBeGreaterThan(5000);

  await signIn(page, seed.admin, `/console/servers?fleet=${STAGING}`);
  const row = page.locator("#servers tbody tr", { hasText: "sim-1" }).first();
  await expect(row.locator("time[data-exact]")).toHaveAttribute("datetime", ledger.last_seen);
  await expect(row.locator("time[data-exact]")).toHaveText(/just now|\ds ago/);
  // The overview names nobody here, so the all-fleets row's figures come from the same truth.
  await page.goto(url(`/console/servers/sim-1`));
  await expect(page.locator("#server-facts time").first()).toHaveAttribute("datetime", ledger.last_seen);
});

test("hostnames in URLs; a name in two fleets asks which; unknown console addresses are HTML 404 pages", async ({
  page,
}) => {
  await ensureStaging();
  await signIn(page);
  const res = await page.goto(url(`/console/servers/sim-10`));
  expect(res!.status()).toBe(200);
  await expect(page.getByRole("heading", { level: 1 })).toContainText("sim-10");
  // Actions on a server reached by name post to its id and come back to its name.
  await expect(page.locator('form[action$="/refresh"]')).toHaveAttribute(
    "action",
    `/console/servers/${staging["sim-10"].id}/refresh`,
  );

  const twin = await admin("POST", "/v1/servers", { fleet: STAGING, hostname: host("app-01").hostname });
  const ambiguous = await page.goto(url(`/console/servers/${host("app-01").hostname}`));
  expect(ambiguous!.status()).toBe(409);
  await expect(page.getByRole("alert")).toContainText("fleet");
  const chosen = await page.goto(url(`/console/servers/${host("app-01").hostname}?fleet=${STAGING}`));
  expect(chosen!.status()).toBe(200);
  await expect(page.locator("#server-facts")).toContainText(twin.id);
  await admin("POST", `/v1/servers/${twin.id}/decommission`, { force: true, reason: "test twin" });

  for (const path of [
    "/console/rollouts/not-a-uuid",
    "/console/servers/no-such-host.example.com",
    "/console/servers/under_score",
    "/console/no-such-page",
  ]) {
    const r = await page.goto(url(path));
    expect(r!.status(), path).toBe(404);
    expect(r!.headers()["content-type"], path).toMatch(/^text\/html/);
    await expect(page.getByRole("alert").getByRole("heading", { level: 1 }), path).toContainText("Not found");
  }
  await accessible(page);
  await screenshots(page, "not-found");
});

test("audit: actors and targets by name, details as text, filtered by hostname", async ({ page }) => {
  await ensureStaging();
  const writer = api(seed.url, seed.writeToken);
  await writer("POST", `/v1/servers/${host("app-02").id}/refresh`);
  await signIn(page, seed.admin, `/console/audit?server=${host("app-02").hostname}`);
  const rows = page.locator("#audit tbody tr");
  await expect(rows.first()).toBeVisible();
  // Every entry is about app-02, named by hostname.
  for (const target of await rows.locator("td:nth-child(4)").allTextContents())
    expect(target).toContain(host("app-02").hostname);
  const refresh = rows.filter({ hasText: "server.refresh" }).first();
  await expect(refresh.locator("td:nth-child(2)")).toHaveText("token console-writer");
  await expect(page.locator("#audit")).not.toContainText(`token:`);
  await expect(page.locator("#audit")).not.toContainText(`server:${host("app-02").id}`);

  await page.goto(url(`/console/audit?server=${STAGING}/sim-2`));
  await expect(rows.first()).toBeVisible();
  await page.goto(url("/console/audit"));
  const created = rows.filter({ hasText: "fleet.create" }).first();
  await expect(created.locator("td:nth-child(2)")).toHaveText("the admin token (ADMIN_TOKEN)");
  await expect(created.locator("td:nth-child(5) dl.details")).toContainText("stale after s");
  for (const cell of await rows.locator("td:nth-child(5)").allTextContents()) expect(cell).not.toMatch(/[{}"]/);
  await accessible(page);
  await screenshots(page, "audit");
});

test("usable at 390 px: pages never scroll sideways; each table scrolls in its own focusable box", async ({ page }) => {
  await ensureStaging();
  await page.setViewportSize({ width: 390, height: 844 });
  await signIn(page, seed.admin, "/console/fleets");
  for (const path of [
    "/console/fleets",
    `/console?fleet=${seed.fleet}`,
    `/console/servers?fleet=${seed.fleet}`,
    `/console/servers/${host("app-04").hostname}`,
    `/console/rollouts/${seed.rollout}`,
    "/console/audit",
  ]) {
    await page.goto(url(path));
    const overflow = await page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth");
    expect(overflow, path).toBeLessThanOrEqual(0);
    for (const box of await page.locator("div.table").all()) {
      await expect(box, path).toHaveAttribute("tabindex", "0");
      await expect(box, path).toHaveAttribute("role", "region");
      // The last column is there: scrolled to, it shows inside the box.
      await box.evaluate((el) => (el.scrollLeft = el.scrollWidth));
      const last = box.locator("thead th").last();
      const [b, l] = [await box.boundingBox(), await last.boundingBox()];
      expect(l!.x + l!.width, path).toBeLessThanOrEqual(b!.x + b!.width + 1);
    }
  }
  await page.goto(url(`/console/servers?fleet=${seed.fleet}`));
  await accessible(page);
  await screenshots(page, "servers-390");
});

test("rollout timing: sub-second durations in ms, no 'to go' once it ended", async ({ page }) => {
  await ensureStaging();
  const r = await admin("POST", "/v1/rollouts", {
    fleet: STAGING,
    agent: "web",
    image: NEW,
    version: "1.5.0",
    concurrency: 1,
    slow_factor: 3,
    server_timeout_s: 600,
  });
  // Hosts that apply at once, but the third takes 4 s: slow against a median of a few hundred ms.
  const moved = new Set<string>();
  const deadline = Date.now() + 40_000;
  while (moved.size < SIMS.length && Date.now() < deadline) {
    for (const name of SIMS) {
      if (moved.has(name)) continue;
      const d = await new HostApi(seed.url, staging[name].token).desired(null, 0);
      if (!d.changed || !d.config.agents.some((a) => a.image === NEW)) continue;
      if (moved.size === 2) await sleep(4000);
      await sendReport(seed.url, staging[name], reportOf(d.config.generation, [{ name: "web", image: NEW }]));
      moved.add(name);
    }
    await sleep(100);
  }
  await expect
    .poll(async () => (await admin("GET", `/v1/rollouts/${r.id}`)).state, { timeout: 15_000 })
    .toBe("succeeded");
  const done = await admin("GET", `/v1/rollouts/${r.id}`);
  expect(done.warnings).toHaveLength(1);
  const words = /(took|has taken) (\d+ ms|\d\.\d s), over 3 x the median \d+ ms/;
  expect(done.warnings[0].message).toMatch(words);

  await signIn(page, seed.admin, `/console/rollouts/${r.id}`);
  await expect(page.locator("#rollout-progress")).toContainText(words);
  const about = page.locator("#rollout-progress dl");
  await expect(about).toContainText(/Median\s*\d+ ms/);
  await expect(about).not.toContainText("to go");
  await expect(page.locator("#rollout-progress")).not.toContainText(" 0 s");
});

test("the overview says who started a rollout by the token's name, not its id", async ({ page }) => {
  await ensureOps();
  const writer = api(seed.url, seed.writeToken);
  const r = await writer("POST", "/v1/rollouts", {
    fleet: OPS,
    agent: "web",
    image: NEW,
    version: "1.5.0",
    concurrency: 1,
    server_timeout_s: 600,
  });
  try {
    await signIn(page, seed.admin, `/console?fleet=${OPS}`);
    const card = page.locator("#overview-rollouts section", { hasText: "web" });
    await expect(card).toContainText("by token console-writer");
    await expect(card).not.toContainText("token:");
  } finally {
    await admin("POST", `/v1/rollouts/${r.id}/cancel`);
  }
});
