#!/usr/bin/env node
/**
 * harbormaster-agent: the host agent a Linux machine runs (docs/host-agents.md).
 *   join URL TOKEN   enroll this machine (once); `run` is what systemd starts; `status`; `version`.
 * Every command takes `--config FILE` and `--state-dir DIR`, so agents can run side by side.
 */
import { Command, CommanderError, Option } from "commander";
import { ApiError } from "../http.ts";
import { ConfigError, loadConfig, type LoadedConfig } from "./config.ts";
import { makeDrivers } from "./drivers.ts";
import { join, parseLabels } from "./join.ts";
import { createLogger } from "./log.ts";
import { EXIT_CONFIG, runAgent } from "./run.ts";
import { StateDir, UnreadableStateFile } from "./state.ts";
import { formatStatus, statusView } from "./status.ts";
import { AGENT_VERSION } from "./version.ts";

interface Globals {
  config?: string;
  stateDir?: string;
}

function load(g: Globals): LoadedConfig {
  return loadConfig(g.config ?? null, process.env, { state_dir: g.stateDir });
}

export async function main(argv: string[]): Promise<number> {
  let code = 0;
  const program = new Command()
    .name("harbormaster-agent")
    .description(
      "The Harbormaster host agent: joins a fleet, runs the agents its desired config names, reports the truth.",
    )
    .option(
      "--config <file>",
      "configuration file (JSON or YAML; default /etc/harbormaster-agent/config.yaml if it exists)",
    )
    .option("--state-dir <dir>", "where the identity and state are kept (default /var/lib/harbormaster-agent)")
    .exitOverride()
    .showHelpAfterError();

  program
    .command("join")
    .description("enroll this machine with an enrollment token (hme.…); once joined, does nothing")
    .argument("<url>", "Harbormaster's URL, e.g. https://hm.example.com")
    .argument("<token>", "the enrollment token (hme.…); `-` reads it from standard input")
    .option("--hostname <name>", "the hostname to register (default: this machine's)")
    .option("--fleetlock-id <id>", "this host's FleetLock id (default: its machine id)")
    .option(
      "--label <key=value>",
      "a label of this server (repeatable), merged over the enrollment token's: --label zone=eu-1a",
      (term: string, all: string[]) => [...all, term],
      [] as string[],
    )
    .action(
      async (
        url: string,
        token: string,
        opts: { hostname?: string; fleetlockId?: string; label: string[] },
        cmd: Command,
      ) => {
        const { config } = load(cmd.optsWithGlobals());
        const log = createLogger({ level: config.log_level });
        if (token === "-") token = (await readStdin()).trim();
        const state = new StateDir(config.state_dir);
        try {
          const r = await join(state, config, {
            url,
            token,
            hostname: opts.hostname,
            fleetlockId: opts.fleetlockId,
            labels: parseLabels(opts.label),
          });
          const id = r.identity;
          if (r.joined) {
            log.info("joined", { fleet: id.fleet, hostname: id.hostname, server: id.server_id, url: id.url });
            process.stdout.write(
              `joined fleet ${id.fleet} as ${id.hostname} (server ${id.server_id}); start the agent: systemctl enable --now harbormaster-agent\n`,
            );
          } else {
            process.stdout.write(
              `already joined fleet ${id.fleet} as ${id.hostname} (server ${id.server_id}) at ${id.url}; nothing done (to join again, remove ${state.path("identity.json")} first)\n`,
            );
          }
        } catch (err) {
          if (err instanceof ApiError) {
            const why =
              err.status === 401
                ? "the enrollment token was refused (expired, revoked, used up, or mistyped)"
                : `the server refused the enrollment (${err.status} ${err.code})`;
            log.error(`join failed: ${why}: ${err.message}`);
          } else {
            const e = err as Error & { cause?: { message?: string } };
            log.error(`join failed: ${e.message}${e.cause?.message ? ` (${e.cause.message})` : ""}`);
          }
          code = 1;
        }
      },
    );

  program
    .command("run")
    .description("run the agent's loop (what systemd starts)")
    .addOption(new Option("--trial", "a new build's trial: exit 0 on the first accepted report").hideHelp())
    .action(async (opts: { trial?: boolean }, cmd: Command) => {
      const g = cmd.optsWithGlobals() as Globals;
      const loaded = load(g);
      const log = createLogger({ level: loaded.config.log_level });
      const stop = new AbortController();
      const onSignal = () => stop.abort();
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
      code = await runAgent({
        config: loaded.config,
        configFile: g.config ?? null,
        state: new StateDir(loaded.config.state_dir),
        log,
        drivers: makeDrivers,
        trial: !!opts.trial,
        signal: stop.signal,
      });
      process.off("SIGTERM", onSignal);
      process.off("SIGINT", onSignal);
    });

  program
    .command("status")
    .description("what this agent holds, what it last reported, and whether it is connected")
    .option("--json", "as JSON")
    .action((opts: { json?: boolean }, cmd: Command) => {
      const { config } = load(cmd.optsWithGlobals());
      const view = statusView(new StateDir(config.state_dir));
      process.stdout.write(opts.json ? `${JSON.stringify(view, null, 2)}\n` : `${formatStatus(view)}\n`);
      if (!view.joined) code = 3;
    });

  program
    .command("version")
    .description("print the agent's version")
    .action(() => {
      process.stdout.write(
        `harbormaster-agent ${AGENT_VERSION} (node ${process.version}, ${process.platform}-${process.arch})\n`,
      );
    });

  try {
    await program.parseAsync(argv, { from: "user" });
  } catch (err) {
    if (err instanceof CommanderError) return err.exitCode === 0 ? 0 : 2;
    if (err instanceof ConfigError) {
      createLogger().error(err.message);
      return EXIT_CONFIG;
    }
    throw err;
  }
  return code;
}

function readStdin(): Promise<string> {
  return new Promise((resolve, reject) => {
    let data = "";
    process.stdin.setEncoding("utf8");
    process.stdin.on("data", (d) => (data += d));
    process.stdin.on("end", () => resolve(data));
    process.stdin.on("error", reject);
  });
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    // A damaged state file is not the agent's bug: say which, and do not ask to be restarted.
    if (err instanceof UnreadableStateFile) {
      createLogger().error(`${err.message}: restore it from a backup, or remove it`);
      process.exit(EXIT_CONFIG);
    }
    createLogger().error(`unexpected failure: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
    process.exit(70);
  },
);
