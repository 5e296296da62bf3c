import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { call, createFleet, uniq } from "./helpers";

const inADay = () => new Date(Date.now() + 24 * 3600 * 1000).toISOString();
const machine = () => ({
  hostname: `${uniq("m")}.example.com`,
  machine_id: crypto.randomUUID().replace(/-/g, ""),
  boot_id: crypto.randomUUID(),
});

describe("the disruption budget setting and enrollment labels refuse bad input, changing nothing", () => {
  it("refuses bad budgets with their paths, keeps the fleet as it was, and clears with null", async () => {
    const { id } = await createFleet();
    const bad: [unknown, string][] = [
      [{ max_unavailable: "150%" }, "disruption_budget.max_unavailable"],
      [{ max_unavailable: 0 }, "disruption_budget.max_unavailable"],
      [{ per_label: { "Zone!": 1 } }, "disruption_budget.per_label"],
      [{ per_label: { zone: "x" } }, "disruption_budget.per_label.zone"],
      [{}, "disruption_budget"],
      [{ max_unavailable: 1, extra: true }, "disruption_budget"],
    ];
    for (const [budget, path] of bad) {
      const res = await call("PATCH", `/v1/fleets/${id}`, { body: { disruption_budget: budget } });
      expect(res.status, JSON.stringify(budget)).toBe(400);
      expect(res.json.error.code).toBe("validation_failed");
      expect(
        (res.json.error.details as { path: string }[]).some((d) => d.path.startsWith(path)),
        JSON.stringify(res.json.error.details),
      ).toBe(true);
    }
    expect((await call("GET", `/v1/fleets/${id}`)).json.disruption_budget).toBeNull();
    const ok = await call("PATCH", `/v1/fleets/${id}`, {
      body: { disruption_budget: { max_unavailable: "25%", per_label: { zone: 1 } } },
    });
    expect(ok.json.disruption_budget).toEqual({ max_unavailable: "25%", per_label: { zone: 1 } });
    const cleared = await call("PATCH", `/v1/fleets/${id}`, { body: { disruption_budget: null } });
    expect(cleared.json.disruption_budget).toBeNull();
  });

  it("merges the token's labels with the machine's (the machine's win), and refuses too many without using the token", async () => {
    const { id } = await createFleet();
    const t = await call("POST", `/v1/fleets/${id}/enrollment-tokens`, {
      body: { expires_at: inADay(), max_uses: 2, labels: { zone: "eu-1a", tier: "web" } },
    });
    expect(t.status).toBe(201);
    expect(t.json.labels).toEqual({ tier: "web", zone: "eu-1a" });
    const e = await call("POST", "/v1/agent/enroll", {
      token: t.json.token,
      body: { ...machine(), labels: { zone: "eu-1b", rack: "r12" } },
    });
    expect(e.status).toBe(201);
    const s = await call("GET", `/v1/servers/${e.json.id}`);
    expect(s.json.labels).toEqual({ rack: "r12", tier: "web", zone: "eu-1b" });
    const many = Object.fromEntries(Array.from({ length: 15 }, (_, i) => [`k${i}`, "v"]));
    const refused = await call("POST", "/v1/agent/enroll", {
      token: t.json.token,
      body: { ...machine(), labels: many },
    });
    expect(refused.status).toBe(400);
    expect(refused.json.error.message).toMatch(/17 labels/);
    expect(refused.json.error.details).toEqual([expect.objectContaining({ path: "labels" })]);
    const row = await env.DB.prepare("SELECT uses FROM enrollment_tokens WHERE id = ?").bind(t.json.id).first();
    expect(row).toEqual({ uses: 1 });
  });
});
