import { describe, expect, it } from "vitest";
import { call, createFleet } from "./helpers";
import { consoleFetch, signIn } from "./console-helpers";

/** The hidden fields of the page's create form, as a browser would send them back. */
function formOf(html: string) {
  const form = /<form[^>]*aria-label="Create an enrollment token"[\s\S]*?<\/form>/.exec(html)![0];
  const fields: Record<string, string> = {};
  for (const m of form.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)"/g)) fields[m[1]] = m[2];
  return fields;
}

const tokenShown = (html: string) => /<code class="mono" id="token-value">\s*(hme\.[^<\s]+)/.exec(html)?.[1];

describe("the console's enrollment token form sent twice", () => {
  it("creates one token: the second send shows the same token, its secret issued again, and says so", async () => {
    const fleet = await createFleet();
    const s = await signIn();
    const page = await consoleFetch(`/console/enrollment?fleet=${fleet.id}`, { cookie: s.cookie });
    const hidden = formOf(await page.text());
    expect(hidden.idempotency_key).toMatch(/^[0-9a-f-]{36}$/);
    const body = {
      ...hidden,
      name: "twice",
      lifetime: "3600",
      max_uses: "1",
      reboot_group: "default",
      kind: "managed",
    };
    const first = await consoleFetch(`/console/enrollment/create?fleet=${fleet.id}`, { cookie: s.cookie, body });
    const firstHtml = await first.text();
    expect(first.status).toBe(200);
    expect(firstHtml).not.toContain('id="token-replayed"');
    const again = await consoleFetch(`/console/enrollment/create?fleet=${fleet.id}`, { cookie: s.cookie, body });
    const againHtml = await again.text();
    expect(again.status).toBe(200);
    expect(againHtml).toContain('id="token-replayed"');
    const [a, b] = [tokenShown(firstHtml), tokenShown(againHtml)];
    expect(a && b && a.split(".")[1]).toBe(b!.split(".")[1]);
    expect(a).not.toBe(b);
    const listed = await call("GET", `/v1/fleets/${fleet.id}/enrollment-tokens`);
    expect(listed.json.items).toHaveLength(1);
    // A form shown anew is a new create.
    const next = formOf(
      await (await consoleFetch(`/console/enrollment?fleet=${fleet.id}`, { cookie: s.cookie })).text(),
    );
    expect(next.idempotency_key).not.toBe(hidden.idempotency_key);
  });
});
