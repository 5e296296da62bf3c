import type { Command } from "commander";
import type { AuditEntry } from "../api.ts";
import { sleep } from "../../agent/http.ts";
import { duration, visible } from "../format.ts";
import { untilStopped, type Io, type Output } from "../io.ts";
import { act } from "../context.ts";
import { Exit } from "../io.ts";
import { verifyChain, type DownloadedDay } from "../../src/audit/archive.ts";

export function registerAudit(program: Command, io: Io) {
  const audit = program
    .command("audit")
    .description("who did what, newest first")
    .option("--target <target>", "only this target: server:<hostname or id>, fleet:<id>, rollout:<id>, token:<id>")
    .option("--limit <n>", "entries", Number, 20)
    .option("-f, --follow", "keep printing new entries (Ctrl-C ends)")
    .option("--interval <duration>", "with --follow, time between looks (2s)", duration({ min: 0.1 }), 2)
    .option("--for <duration>", "with --follow, stop after this long (30s, 5m)", duration())
    .action(
      act(io, async (ctx, o: { target?: string; limit: number; follow?: boolean; interval: number; for?: number }) => {
        const first = await ctx.api.audit({ target: o.target, limit: o.limit });
        const out = ctx.out;
        if (!o.follow) {
          if (ctx.machine) return out.data(first.items, (e) => String(e.id));
          return out.table(
            ["AT", "ACTOR", "ACTION", "TARGET", { head: "ID", wide: true }],
            first.items.map((e) => [out.time(e.at), e.actor, e.action, targetName(e), e.id]),
            "(no entries)",
          );
        }
        // Following prints oldest first, one entry per line (JSON lines with --json).
        let last = 0;
        const emit = (items: AuditEntry[]) => {
          for (const e of [...items].sort((a, b) => a.id - b.id)) {
            if (e.id <= last) continue;
            last = e.id;
            printEntry(out, e, !!ctx.machine);
          }
        };
        emit(first.items);
        await untilStopped(o.for, async (signal) => {
          while (!signal.aborted) {
            await sleep(o.interval * 1000, signal).catch(() => {});
            if (signal.aborted) break;
            // Newest first: page back until reaching what was already shown.
            const fresh: AuditEntry[] = [];
            let cursor: string | null = null;
            for (;;) {
              const page: { items: AuditEntry[]; next_cursor: string | null } = await ctx.api.audit({
                target: o.target,
                limit: 100,
                cursor,
              });
              fresh.push(...page.items.filter((e) => e.id > last));
              if (!page.next_cursor || page.items.some((e) => e.id <= last)) break;
              cursor = page.next_cursor;
            }
            emit(fresh);
          }
        });
      }),
    );

  audit
    .command("export")
    .description("the audit log as NDJSON, oldest first, every row once (to a file: > audit.ndjson)")
    .option("--since <time>", "start at the first row dated then or later (ISO 8601, e.g. 2026-11-01T00:00:00Z)")
    .option("--cursor <cursor>", "resume where a previous export stopped (it prints its cursor on stderr)")
    .option("--page <n>", "rows per request (1-5000)", Number, 1000)
    .action(
      act(io, async (ctx, o: { since?: string; cursor?: string; page: number }) => {
        // Rows go to stdout as the API sends them; the cursor after each page goes to stderr, so a
        // run cut short resumes with `--cursor … >> file` and neither loses nor repeats a row.
        let cursor = o.cursor;
        let rows = 0;
        for (;;) {
          const page = await ctx.api.exportAudit({ since: o.since, cursor, limit: o.page });
          io.stdout(page.text);
          rows += page.text.split("\n").length - 1;
          cursor = page.cursor;
          io.stderr(`cursor: ${cursor}\n`);
          if (!page.more) break;
        }
        io.stderr(`${rows} rows; resume with: hm audit export --cursor ${cursor}\n`);
      }),
    );

  audit
    .command("verify")
    .description("download the audit day files and check their digest chain; prints the first broken day")
    .option("--from <day>", "the first day to check (YYYY-MM-DD); its link to the day before is taken as given")
    .action(
      act(io, async (ctx, o: { from?: string }) => {
        if (o.from !== undefined && !/^\d{4}-\d{2}-\d{2}$/.test(o.from))
          throw new Exit(2, "--from is a day: YYYY-MM-DD");
        const listed = await ctx.api.auditDays(o.from);
        const days: DownloadedDay[] = [];
        for (const d of listed) days.push({ day: d.day, text: await ctx.api.auditDay(d.day) });
        const newest = listed.at(-1);
        const broken = await verifyChain(days, newest && { day: newest.day, sha256: newest.sha256 });
        const result = {
          ok: broken === null,
          days: days.length,
          from: listed[0]?.day ?? null,
          to: newest?.day ?? null,
          broken_day: broken?.day ?? null,
          problem: broken?.problem ?? null,
        };
        if (ctx.machine) ctx.out.data(result, () => (broken ? broken.day : "ok"));
        else if (broken) ctx.out.line(`${broken.day}: ${broken.problem}`);
        else if (days.length === 0) ctx.out.line("no audit day files yet (the cron cuts each day once it is over)");
        else ctx.out.line(`${days.length} days, ${result.from} to ${result.to}: the chain holds`);
        if (broken) throw new Exit(1, `the audit chain is broken at ${broken.day}`);
      }),
    );
}

function printEntry(out: Output, e: AuditEntry, json: boolean) {
  if (out.format === "name") return out.line(String(e.id));
  if (json) return out.line(JSON.stringify(e));
  out.line(`${out.c.dim(e.at)}  ${visible(e.actor)}  ${out.c.bold(e.action)}  ${visible(targetName(e))}`);
}

/** server:<hostname> rather than its id, when the entry names a server. */
const targetName = (e: AuditEntry) => (e.hostname ? `server:${e.hostname}` : e.target);
