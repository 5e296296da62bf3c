/**
 * The drift page lists the disruption budget's units drift fixes hold, and an operator frees one
 * whose server never reported its fix realized: a fleet of its own with a budget of one server.
 */
import { accessible, admin, audited, expect, signIn, test, url } from "./fixtures.ts";
import { reportOf, sendReport, type Host } from "./seed.ts";

const FLEET = `fix-${Date.now().toString(36)}`;
const GOOD = "registry.example/fixed:1";
const WRONG = "registry.example/fixed:0";
let host: Host;

test.beforeAll(async () => {
  await admin("POST", "/v1/fleets", { id: FLEET, disruption_budget: { max_unavailable: 1 } });
  const s = await admin("POST", "/v1/servers", { fleet: FLEET, hostname: `web-1.${FLEET}.test`, kind: "managed" });
  host = { id: s.id, hostname: s.hostname, token: s.token, fleetlockId: "" };
  const d = await admin("PUT", `/v1/servers/${s.id}/desired`, {
    generation: 2,
    agents: [{ name: "fixed", image: GOOD, version: "1" }],
  });
  await sendReport(url(""), host, reportOf(d.generation, [{ name: "fixed", image: GOOD }]));
  // The host drifts: it runs an image it was not asked for.
  await sendReport(url(""), host, reportOf(d.generation, [{ name: "fixed", image: WRONG }]));
  await expect
    .poll(async () => (await admin("GET", `/v1/check/server-agents?fleet=${FLEET}`)).findings.length)
    .toBeGreaterThan(0);
  // The fix re-issues its config; the host never reports it realized, so the unit stays held.
  const fixed = await admin("POST", "/v1/check/server-agents/fix", { fleet: FLEET, dry_run: false });
  expect(fixed.actions[0].result).toMatchObject({ ok: true, outcome: "reissued" });
});

test("the drift page shows the unit a fix holds, and an operator frees it after typing the hostname", async ({
  page,
}) => {
  await signIn(page, undefined, `/console/drift?fleet=${FLEET}`);
  const holds = page.getByRole("table", { name: "Budget held by fixes" });
  await expect(holds).toContainText(host.hostname);
  await expect(holds).toContainText("written");
  await accessible(page);
  const form = page.getByRole("form", { name: `Release the unit held for ${host.hostname}` });
  // A wrong confirmation changes nothing.
  await form.getByLabel("Type the hostname to confirm").fill("not-it");
  await form.getByRole("button", { name: "Release" }).click();
  await expect(page.getByRole("alert")).toContainText("type the server's hostname");
  expect((await admin("GET", `/v1/fleets/${FLEET}/fix-holds`)).items).toHaveLength(1);
  await page
    .getByRole("form", { name: `Release the unit held for ${host.hostname}` })
    .getByLabel("Type the hostname to confirm")
    .fill(host.hostname);
  await page
    .getByRole("form", { name: `Release the unit held for ${host.hostname}` })
    .getByRole("button", { name: "Release" })
    .click();
  await expect(page.locator(".flash.ok")).toContainText(`the budget unit held for ${host.hostname} was freed`);
  await expect(page.getByText("No fix holds a unit of the budget.")).toBeVisible();
  expect((await admin("GET", `/v1/fleets/${FLEET}/fix-holds`)).items).toEqual([]);
  await audited("disruption.release", `fleet:${FLEET}`);
});
