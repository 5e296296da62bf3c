import type { Command } from "commander";
import type { AuditEntry } from "../api.ts";
import { sleep } from "../../agent/http.ts";
import { duration, visible } from "../format.ts";
import { untilStopped, type Io, type Output } from "../io.ts";
import { act } from "../context.ts";

export function registerAudit(program: Command, io: Io) {
  program
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
}

function printEntry(out: Output, e: AuditEntry, json: boolean) {
  if (out.format === "name") return out.line(String(e.id));
  if (json) return out.line(JSON.stringify(e));
  out.line(`${out.c.dim(e.at)}  ${visible(e.actor)}  ${out.c.bold(e.action)}  ${visible(targetName(e))}`);
}

/** server:<hostname> rather than its id, when the entry names a server. */
const targetName = (e: AuditEntry) => (e.hostname ? `server:${e.hostname}` : e.target);
