/**
 * hm audit export (NDJSON to stdout, resumable with the cursor it prints on stderr) against the
 * e2e server, and hm audit verify over day files: the real days route's shape, served by a fetch
 * that stands in for R2 (the server's own files are cut only once a day is over).
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, inject, it } from "vitest";
import { Api } from "../cli/api.ts";
import { dayFile, fileSha256, type AuditLine } from "../src/audit/archive.ts";
import { hmRunner } from "./hm.ts";

const url = inject("hmUrl");
const admin = inject("hmAdmin");
const api = new Api(url, admin);
const hm = hmRunner(url, admin, mkdtempSync(join(tmpdir(), "hm-audit-")));
let n = 0;
const fresh = (p: string) => `${p}-${Date.now().toString(36)}-${n++}`;

const lines = (text: string) =>
  text
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as AuditLine);
const cursors = (stderr: string) => [...stderr.matchAll(/^cursor: (\S+)$/gm)].map((m) => m[1]);

describe("hm audit export", () => {
  it("writes every row once, oldest first; a run resumed from any printed cursor gives the rest, and later rows", async () => {
    const since = new Date(Date.now() - 1000).toISOString();
    const fleets = [fresh("exp"), fresh("exp"), fresh("exp"), fresh("exp"), fresh("exp")];
    for (const f of fleets) await api.createFleet({ id: f });
    const all = await hm(["audit", "export", "--since", since, "--page", "2"]);
    expect(all.code, all.stderr).toBe(0);
    const rows = lines(all.stdout);
    const ids = rows.map((r) => r.id);
    expect(ids).toEqual([...ids].sort((a, b) => a - b));
    expect(new Set(ids).size).toBe(ids.length);
    for (const f of fleets) expect(rows.filter((r) => r.target === `fleet:${f}`).length).toBeGreaterThan(0);
    const printed = cursors(all.stderr);
    expect(printed.length).toBeGreaterThanOrEqual(3);
    // Killed after the first page: resuming from its cursor gives exactly the rest.
    const rest = await hm(["audit", "export", "--cursor", printed[0]]);
    expect(rest.code, rest.stderr).toBe(0);
    expect(lines(rest.stdout).map((r) => r.id)).toEqual(ids.slice(2));
    // From the last cursor: nothing, then only what came since.
    const later = fresh("exp");
    await api.createFleet({ id: later });
    const tail = await hm(["audit", "export", "--cursor", printed.at(-1)!]);
    expect(lines(tail.stdout).every((r) => r.target === `fleet:${later}`)).toBe(true);
    expect(lines(tail.stdout).length).toBeGreaterThan(0);
  });

  it("refuses a cursor it did not issue, with the API's error", async () => {
    const r = await hm(["audit", "export", "--cursor", "bogus"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("invalid_cursor");
    expect(r.stdout).toBe("");
  });
});

/** Three chained day files, as the cron writes them. */
async function chain() {
  const days = ["2030-01-01", "2030-01-02", "2030-01-03"];
  const out: { day: string; text: string; sha256: string }[] = [];
  let prev: { sha256: string; last: number } | null = null;
  let id = 0;
  for (const day of days) {
    const rows: AuditLine[] = [1, 2].map(() => ({
      id: ++id,
      at: `${day}T10:00:00.000Z`,
      actor: "token:bootstrap",
      actor_name: "ADMIN_TOKEN",
      action: "fleet.create",
      target: `fleet:f${id}`,
      hostname: null,
      details: null,
    }));
    const text = dayFile(
      { audit_day: day, format: 1, prev_sha256: prev?.sha256 ?? null, after_id: prev?.last ?? 0, last_id: id, rows: 2 },
      rows,
    );
    const sha256 = await fileSha256(text);
    out.push({ day, text, sha256 });
    prev = { sha256, last: id };
  }
  return out;
}

/** The days routes answered from `files` (as the server answers from R2); the rest goes to the server. */
function serving(files: { day: string; text: string; sha256: string }[]): typeof fetch {
  return async (input, init) => {
    const u = new URL(typeof input === "string" ? input : input instanceof URL ? input.href : input.url);
    if (u.pathname === "/v1/audit/days") {
      const items = files.map((f, i) => ({
        day: f.day,
        sha256: f.sha256,
        prev_sha256: i ? files[i - 1].sha256 : null,
        after_id: 0,
        last_id: 0,
        rows: 2,
      }));
      return Response.json({ items, next_from: null });
    }
    const m = /^\/v1\/audit\/days\/(.+)$/.exec(u.pathname);
    if (m) {
      const f = files.find((x) => x.day === m[1]);
      return f
        ? new Response(f.text, { headers: { "Content-Type": "application/x-ndjson" } })
        : new Response("", { status: 404 });
    }
    return fetch(input, init);
  };
}

describe("hm audit verify", () => {
  it("says the chain holds, and names the first broken day when one is altered or missing", async () => {
    const files = await chain();
    const ok = await hm(["audit", "verify"], { fetch: serving(files) });
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout).toContain("3 days, 2030-01-01 to 2030-01-03: the chain holds");

    const altered = files.map((f, i) => (i === 0 ? { ...f, text: f.text.replace("fleet:f1", "fleet:fX") } : f));
    const bad = await hm(["audit", "verify"], { fetch: serving(altered) });
    expect(bad.code).toBe(1);
    expect(bad.stdout).toContain("2030-01-02: its link to 2030-01-01 does not match");

    const missing = await hm(["-o", "json", "audit", "verify"], { fetch: serving([files[0], files[2]]) });
    expect(missing.code).toBe(1);
    expect(missing.json()).toMatchObject({ ok: false, broken_day: "2030-01-03", problem: "day 2030-01-02 is missing" });

    // --from starts the check there: the link before it is taken as given.
    const from = await hm(["audit", "verify", "--from", "2030-01-02"], { fetch: serving(files.slice(1)) });
    expect(from.code, from.stderr).toBe(0);
  });

  it("on the real server: no files yet is not an error; a bad --from is a usage error", async () => {
    const none = await hm(["-o", "json", "audit", "verify"]);
    expect(none.code, none.stderr).toBe(0);
    expect(none.json()).toMatchObject({ ok: true });
    expect((await hm(["audit", "verify", "--from", "yesterday"])).code).toBe(2);
  });
});
