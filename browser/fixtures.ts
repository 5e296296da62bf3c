import AxeBuilder from "@axe-core/playwright";
import { test as base, expect, type Page } from "@playwright/test";
import { mkdirSync } from "node:fs";
import { resolve } from "node:path";
import { api, sendReport, type Seed } from "./seed.ts";

export const seed: Seed = JSON.parse(process.env.HM_CONSOLE_SEED ?? "null");
export const url = (path: string) => `${seed.url}${path}`;
export const admin = api(seed?.url ?? "", seed?.admin ?? "");

/** The seeded hosts that keep reporting do so every 3 s, as agents would (the fleet's stale_after is 10 s). */
const heartbeat = () =>
  Promise.all(Object.entries(seed.reports).map(([h, r]) => sendReport(seed.url, seed.hosts[h], r).catch(() => null)));

export const test = base.extend<{}, { hosts: void }>({
  hosts: [
    async ({}, use) => {
      const timer = setInterval(() => void heartbeat(), 3000);
      await use();
      clearInterval(timer);
    },
    { scope: "worker", auto: true },
  ],
});
export { expect };

/** Signs in and lands on `next` (the seeded fleet's overview: /console alone lists fleets once there are several). */
export async function signIn(page: Page, token = seed.admin, next = `/console?fleet=${seed?.fleet}`) {
  await page.goto(url(`/console/sign-in?next=${encodeURIComponent(next)}`));
  await page.getByLabel("Operator token").fill(token);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.locator("body")).toHaveAttribute("data-scope", /read|write|admin/);
}

/** No serious or critical accessibility violation (axe-core), in light and dark. */
export async function accessible(page: Page) {
  for (const colorScheme of ["light", "dark"] as const) {
    await page.emulateMedia({ colorScheme });
    const result = await new AxeBuilder({ page }).analyze();
    const bad = result.violations.filter((v) => v.impact === "serious" || v.impact === "critical");
    expect(
      bad.map(
        (v) =>
          `${v.id}: ${v.help} (${v.nodes
            .map((n) => n.target.join(" "))
            .slice(0, 3)
            .join(", ")})`,
      ),
      colorScheme,
    ).toEqual([]);
  }
  await page.emulateMedia({ colorScheme: "light" });
}

const shots = resolve(import.meta.dirname, ".out/screenshots");
/** Light and dark full-page screenshots, for docs/screenshots. */
export async function screenshots(page: Page, name: string) {
  mkdirSync(shots, { recursive: true });
  for (const colorScheme of ["light", "dark"] as const) {
    await page.emulateMedia({ colorScheme });
    await page.screenshot({ path: `${shots}/${name}-${colorScheme}.png`, fullPage: true });
  }
  await page.emulateMedia({ colorScheme: "light" });
}

/** The page is live: its socket to the fleet's feed is open. */
export const live = (page: Page) =>
  expect(page.locator("body")).toHaveAttribute("data-live", "on", { timeout: 10_000 });

/** Marks the document, so a test can tell a live update from a reload (a reload loses the mark). */
export const markDocument = (page: Page) => page.evaluate("window.__notReloaded = true");
export const notReloaded = async (page: Page) =>
  expect(await page.evaluate("window.__notReloaded === true")).toBe(true);

/** The audit log has an entry with `action` (outbox deliveries land within a second or so). */
export async function audited(action: string, target?: string) {
  await expect
    .poll(
      async () => {
        const page = await admin("GET", `/v1/audit?limit=200${target ? `&target=${encodeURIComponent(target)}` : ""}`);
        return page.items.some((e: { action: string }) => e.action === action);
      },
      { timeout: 10_000, message: `audited ${action}` },
    )
    .toBe(true);
}
