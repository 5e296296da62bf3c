import { Command, CommanderError, Option } from "commander";
import { ApiError } from "./api.ts";
import { Exit, FORMATS, processIo, type Io } from "./io.ts";
import { fillFleet } from "./context.ts";
import { registerCompletion } from "./commands/completion.ts";
import { registerContexts } from "./commands/contexts.ts";
import { registerIntent } from "./commands/intent.ts";
import { VERSION } from "./version.ts";
import { registerAudit } from "./commands/audit.ts";
import { registerCheck } from "./commands/check.ts";
import { registerDesired } from "./commands/desired.ts";
import { registerFleets } from "./commands/fleets.ts";
import { registerFleetlock } from "./commands/fleetlock.ts";
import { registerInstances } from "./commands/instances.ts";
import { registerLogin } from "./commands/login.ts";
import { registerRebootGroups } from "./commands/reboot-groups.ts";
import { registerServers } from "./commands/servers.ts";
import { registerStatus } from "./commands/status.ts";
import { registerTokens } from "./commands/tokens.ts";
import { registerSso } from "./commands/sso.ts";
import { registerUpgrades } from "./commands/upgrades.ts";
import { registerWait } from "./commands/wait.ts";
import { registerRollouts } from "./commands/rollouts.ts";
import { registerSpec } from "./commands/spec.ts";
import { registerGates } from "./commands/gates.ts";
import { registerWebhooks } from "./commands/webhooks.ts";
import { registerEnrollTokens } from "./commands/enroll-tokens.ts";
import { registerAgent } from "./commands/agent.ts";
import { registerImages } from "./commands/images.ts";
import { registerHistory } from "./commands/history.ts";

export function buildProgram(io: Io): Command {
  const program = new Command("hm")
    .description("Harbormaster operator CLI")
    .addOption(new Option("--url <url>", "API base URL").env("HM_URL"))
    .addOption(new Option("--token <token>", "operator token").env("HM_TOKEN"))
    .addOption(
      new Option("--context <name>", "use this context of the config file (hm context list)").env("HM_CONTEXT"),
    )
    .addOption(
      new Option(
        "-o, --output <format>",
        "table, wide (more columns), json or yaml (the API's objects), name; csv for hm history",
      ).choices(FORMATS),
    )
    .option("--json", "the same as -o json")
    .option("--no-headers", "tables without their header row")
    .option("--absolute-times", "timestamps as ISO 8601 instead of '3m ago'")
    .option("-y, --yes", "do not ask before destructive changes")
    .option("--no-color", "no colours")
    .addHelpText("after", "\nhm --version prints the version; hm completion bash|zsh|fish prints a completion script.")
    .showHelpAfterError("(run with --help for usage)")
    .exitOverride()
    .configureOutput({ writeOut: io.stdout, writeErr: io.stderr });
  for (const register of [
    registerLogin,
    registerStatus,
    registerFleets,
    registerServers,
    registerDesired,
    registerInstances,
    registerRebootGroups,
    registerGates,
    registerWebhooks,
    registerImages,
    registerFleetlock,
    registerTokens,
    registerSso,
    registerEnrollTokens,
    registerAgent,
    registerUpgrades,
    registerAudit,
    registerHistory,
    registerCheck,
    registerWait,
    registerRollouts,
    registerSpec,
    registerIntent,
    registerContexts,
    registerCompletion,
  ]) {
    register(program, io);
  }
  program.hook("preAction", fillFleet(io));
  // Subcommands inherit the output hooks and exit override, so usage errors come back here.
  const inherit = (cmd: Command) => {
    for (const sub of cmd.commands) {
      sub
        .exitOverride()
        .configureOutput({ writeOut: io.stdout, writeErr: io.stderr })
        .showHelpAfterError("(run with --help for usage)");
      inherit(sub);
    }
  };
  inherit(program);
  return program;
}

/** Runs hm with `argv` (without node and script) and answers its exit code. */
export async function main(argv: string[], io: Io = processIo()): Promise<number> {
  // Commander reads HM_URL / HM_TOKEN from process.env; the injected environment stands in.
  const saved = { url: process.env.HM_URL, token: process.env.HM_TOKEN, context: process.env.HM_CONTEXT };
  setEnv("HM_URL", io.env.HM_URL);
  setEnv("HM_TOKEN", io.env.HM_TOKEN);
  setEnv("HM_CONTEXT", io.env.HM_CONTEXT);
  // --version is read here, not declared on the program: commander would take it from
  // `hm rollout start --version 2.0.0` too, where it is the image's version.
  if (argv.length === 1 && (argv[0] === "--version" || argv[0] === "-V")) {
    io.stdout(`hm ${VERSION}\n`);
    return 0;
  }
  try {
    await buildProgram(io).parseAsync(argv, { from: "user" });
    return 0;
  } catch (err) {
    if (err instanceof CommanderError) {
      // --help and --version end through here too, successfully.
      if (err.exitCode === 0 || err.code === "commander.helpDisplayed" || err.code === "commander.version") return 0;
      if (err.code === "commander.help") return 0;
      return 2;
    }
    if (err instanceof Exit) {
      if (err.message) io.stderr(`${err.code === 3 ? "" : "error: "}${err.message}\n`);
      return err.code;
    }
    if (err instanceof ApiError) {
      io.stderr(
        `error: ${err.code}: ${err.message}${err.details === undefined ? "" : `\n${JSON.stringify(err.details)}`}\n`,
      );
      return 1;
    }
    io.stderr(`error: ${err instanceof Error ? err.message : String(err)}\n`);
    return 1;
  } finally {
    setEnv("HM_URL", saved.url);
    setEnv("HM_TOKEN", saved.token);
    setEnv("HM_CONTEXT", saved.context);
  }
}

function setEnv(k: string, v: string | undefined) {
  if (v === undefined) delete process.env[k];
  else process.env[k] = v;
}
