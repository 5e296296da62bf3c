/**
 * The console's shared pieces that decide what a person reads: a last report's freshness when only
 * the index's figure is at hand, natural order, and hostname links.
 */
import { describe, expect, it } from "vitest";
import { LastReport, naturally, serverHref } from "../src/console/ui";

const NOW = Date.parse("2026-11-26T12:00:00Z");
const ago = (s: number) => new Date(NOW - s * 1000).toISOString();
const html = (node: unknown) => String(node);

describe("a last report from the index", () => {
  it("says 'within' the stale-after for a server that is not stale but whose index time is older", () => {
    // The index refreshes a steady host's time every few minutes: 5 min old, but not stale at 60 s.
    const out = html(LastReport({ at: ago(300), status: "realized", staleAfterS: 60, now: NOW }));
    expect(out).toContain("within 1m");
    expect(out).not.toContain("5m ago");
    expect(out).toContain('data-within="60"');
  });

  it("shows the time itself while it is younger than the stale-after, or when the server is stale", () => {
    expect(html(LastReport({ at: ago(30), status: "realized", staleAfterS: 60, now: NOW }))).toContain("<time");
    const stale = html(LastReport({ at: ago(300), status: "stale", staleAfterS: 60, now: NOW }));
    expect(stale).toContain("<time");
    expect(stale).not.toContain("within");
    expect(html(LastReport({ at: null, status: "unknown", staleAfterS: 60, now: NOW }))).toContain("never");
  });
});

describe("natural order", () => {
  it("sorts digits as numbers: sim-2 before sim-10, and keeps text order otherwise", () => {
    const rows = ["sim-10", "sim-2", "db-1", "sim-1", "Sim-3", "sim-100"].map((hostname) => ({ hostname }));
    expect(naturally(rows, (r) => r.hostname).map((r) => r.hostname)).toEqual([
      "db-1",
      "sim-1",
      "sim-2",
      "Sim-3",
      "sim-10",
      "sim-100",
    ]);
  });
});

describe("server links", () => {
  it("name a server by hostname, with its fleet, and fall back to its id", () => {
    expect(serverHref({ id: "x", hostname: "web-1.example.com", fleet: "prod" })).toBe(
      "/console/servers/web-1.example.com?fleet=prod",
    );
    expect(serverHref({ id: "0b0c", hostname: null })).toBe("/console/servers/0b0c");
  });
});
