import { InvalidArgumentError, Option, type Command } from "commander";
import type { Io } from "../io.ts";
import { labelsOf } from "./servers.ts";
import { act } from "../context.ts";
import { parseDuration } from "../format.ts";
import { SERVER_KINDS } from "../../src/domain/enums.ts";

const list = (v: string) =>
  v
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
const positive = (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError("expected a whole number of at least 1");
  return n;
};

const collectLabel = (v: string, prev: string[] = []) => [...prev, v];

/** `hm enroll-tokens`: a fleet's enrollment tokens, which let machines join it by themselves (install.sh, harbormaster-agent join). */
export function registerEnrollTokens(program: Command, io: Io) {
  const tokens = program
    .command("enroll-tokens")
    .description("a fleet's enrollment tokens: machines join the fleet with one (list by default)");
  const listAction = act(io, async (ctx, fleet: string) => {
    const items = await ctx.api.listEnrollmentTokens(fleet);
    if (ctx.machine) return ctx.out.data(items);
    const out = ctx.out;
    out.table(
      [
        "ID",
        "NAME",
        "STATE",
        "USES",
        "ROLES",
        "GROUP",
        "PATTERN",
        "EXPIRES",
        { head: "KIND", wide: true },
        { head: "CREATED BY", wide: true },
      ],
      items.map((t) => [
        t.id,
        t.name,
        t.state,
        `${t.uses}/${t.max_uses}`,
        t.roles.join(","),
        t.reboot_group,
        t.hostname_pattern,
        out.time(t.expires_at),
        t.kind,
        t.created_by,
      ]),
      "(no enrollment tokens)",
    );
  });
  tokens
    .command("list <fleet>", { isDefault: true })
    .alias("ls")
    .description("the fleet's enrollment tokens (never their secrets)")
    .action(listAction);
  tokens
    .command("create <fleet>")
    .description("create an enrollment token; prints it once, with the line that installs the agent with it")
    .option("--name <name>", "what it is for")
    .option("--expires <duration>", "how long it lives (at most 30d)", "24h")
    .option("--max-uses <n>", "how many machines it may enroll", positive, 1)
    .option("--roles <roles>", "roles of the servers it enrolls, comma-separated", list, [])
    .option("--reboot-group <group>", "their reboot group", "default")
    .option("--label <key=value>", "a label of every server it enrolls, e.g. zone=eu-1a (repeatable)", collectLabel)
    .addOption(new Option("--kind <kind>", "their kind").choices(SERVER_KINDS).default("managed"))
    .option(
      "--hostname-pattern <glob>",
      "only hostnames matching it (`*` any run, `?` one character), e.g. 'web-*.example.com'",
    )
    .action(
      act(
        io,
        async (
          ctx,
          fleet: string,
          o: {
            name?: string;
            expires: string;
            maxUses: number;
            roles: string[];
            rebootGroup: string;
            kind: "managed" | "manual";
            hostnamePattern?: string;
            label?: string[];
          },
        ) => {
          let seconds: number;
          try {
            seconds = parseDuration(o.expires);
          } catch (err) {
            throw new InvalidArgumentError(`--expires: ${(err as Error).message}`);
          }
          const t = await ctx.api.createEnrollmentToken(fleet, {
            name: o.name,
            expires_at: new Date(Date.now() + seconds * 1000).toISOString(),
            max_uses: o.maxUses,
            roles: o.roles,
            reboot_group: o.rebootGroup,
            kind: o.kind,
            hostname_pattern: o.hostnamePattern,
            ...(o.label ? { labels: labelsOf(o.label) } : {}),
          });
          if (ctx.machine) return ctx.out.data(t);
          const out = ctx.out;
          out.fields([
            ["id", t.id],
            ["fleet", t.fleet],
            ["uses", `0/${t.max_uses}`],
            ["expires", out.time(t.expires_at)],
            ["token", t.token],
          ]);
          out.note(out.c.yellow("The token is shown only now."));
          out.note(
            `Install the agent on a machine with it:\n  curl -fsSL ${ctx.api.base}/install.sh | sudo sh -s -- --token ${t.token}`,
          );
        },
      ),
    );
  tokens
    .command("revoke <fleet> <id>")
    .description("revoke an enrollment token: it enrolls nothing more (servers it enrolled keep their own tokens)")
    .action(
      act(io, async (ctx, fleet: string, id: string) => {
        await ctx.confirm(
          `Revoke enrollment token ${id} of fleet ${fleet}? Machines joining with it are refused from now on.`,
        );
        const t = await ctx.api.revokeEnrollmentToken(fleet, id);
        if (ctx.machine) return ctx.out.data(t);
        ctx.out.line(`Revoked ${t.id}${t.name ? ` (${t.name})` : ""}: ${t.uses} of ${t.max_uses} used.`);
      }),
    );
}
