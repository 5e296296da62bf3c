/**
 * The agent's configuration: one file (JSON or YAML, `/etc/harbormaster-agent/config.yaml` by
 * default), then environment overrides (HARBORMASTER_AGENT_*), then the command line's
 * `--state-dir`. Every key has a default, so no file at all is a valid configuration; a file that
 * exists but cannot be read or is not valid is an error (the agent stops and changes nothing).
 */
import { existsSync, readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import { z } from "zod";

const DEFAULT_CONFIG_FILES = ["/etc/harbormaster-agent/config.yaml", "/etc/harbormaster-agent/config.json"];

const positiveSeconds = z.number().int().min(1).max(86_400);
const command = z.array(z.string().min(1)).min(1);

export const AgentConfig = z.strictObject({
  /** Where the agent keeps its identity, its status and what it is in the middle of. */
  state_dir: z.string().min(1).default("/var/lib/harbormaster-agent"),
  /** `channel` (a WebSocket the server pushes over, falling back to HTTP) or `http` (the long poll only). */
  transport: z.enum(["channel", "http"]).default("channel"),
  /** A report at least this often, even when nothing changed (the heartbeat). */
  report_interval_s: positiveSeconds.default(60),
  log_level: z.enum(["debug", "info", "warn", "error"]).default("info"),
  /** Where this machine's identity and this boot's id are read (tests point them elsewhere). */
  machine_id_file: z.string().min(1).default("/etc/machine-id"),
  boot_id_file: z.string().min(1).default("/proc/sys/kernel/random/boot_id"),
  podman: z
    .strictObject({
      /** The container engine's command: `podman`, or `docker` (its CLI works the same). */
      engine: z.string().min(1).default("podman"),
      /** Containers are named PREFIX<agent>. */
      name_prefix: z
        .string()
        .regex(/^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/)
        .default("hm-"),
      /** Labels this agent's containers and volumes `io.harbormaster.scope=SCOPE`; it then sees only those (agents sharing one engine). */
      scope: z.string().min(1).nullable().default(null),
      /** Extra `create` arguments for every container (a network, devices). */
      create_args: z.array(z.string()).default([]),
    })
    .prefault({}),
  tarball: z
    .strictObject({
      /** Tarball agents are unpacked under ROOT/opt/harbormaster/agents/NAME/VERSION (another root: tests, chroots). */
      root: z.string().min(1).default("/"),
      /** Longest a hook may run before it is killed and its agent reported failed. */
      hook_timeout_s: positiveSeconds.default(300),
    })
    .prefault({}),
  reboot: z
    .strictObject({
      /** A reboot is needed while this file exists (Debian and Ubuntu's unattended upgrades write it). */
      required_file: z.string().min(1).default("/var/run/reboot-required"),
      /** Or: a reboot is needed when this command exits 0 (e.g. `["needs-restarting","-r"]` inverted by a wrapper on RHEL). */
      check_command: command.nullable().default(null),
      /** What reboots the machine once a FleetLock slot is granted. */
      command: command.default(["systemctl", "reboot"]),
      /** How often the need for a reboot is checked, and a refused slot asked for again. */
      check_interval_s: positiveSeconds.default(300),
      /**
       * The fleet's FleetLock base URL with its key (`…/fleetlock/FLEET/KEY/`, answered by
       * `POST /v1/fleets/{fleet}/fleetlock-key`). Null: this host does not coordinate reboots
       * (and never reboots on its own).
       */
      fleetlock_url: z.string().url().nullable().default(null),
    })
    .prefault({}),
  self_update: z
    .strictObject({
      /** The executable a rollout of `harbormaster-agent` replaces (default: the running one, when it is the packaged build). */
      binary: z.string().min(1).nullable().default(null),
      /** A new build must report within this long (a trial run before the swap, its first run after). */
      start_timeout_s: positiveSeconds.default(120),
    })
    .prefault({}),
  /** After a crash, the wait before connecting again: doubling per crash in a row (./crash-backoff.ts). */
  crash_backoff: z
    .strictObject({
      base_s: positiveSeconds.default(10),
      cap_s: positiveSeconds.default(300),
      /** A run up this long before its crash starts the count over. */
      stable_s: positiveSeconds.default(600),
    })
    .prefault({}),
});
export type AgentConfig = z.infer<typeof AgentConfig>;

type Path = readonly string[];
type EnvValue = "string" | "int" | "command" | "nullable-string" | "nullable-command";

/** The environment overrides: every setting a host may need to change without editing the file. */
const ENV_OVERRIDES: ReadonlyArray<{ name: string; path: Path; type: EnvValue }> = [
  { name: "HARBORMASTER_AGENT_STATE_DIR", path: ["state_dir"], type: "string" },
  { name: "HARBORMASTER_AGENT_TRANSPORT", path: ["transport"], type: "string" },
  { name: "HARBORMASTER_AGENT_REPORT_INTERVAL_S", path: ["report_interval_s"], type: "int" },
  { name: "HARBORMASTER_AGENT_LOG_LEVEL", path: ["log_level"], type: "string" },
  { name: "HARBORMASTER_AGENT_MACHINE_ID_FILE", path: ["machine_id_file"], type: "string" },
  { name: "HARBORMASTER_AGENT_BOOT_ID_FILE", path: ["boot_id_file"], type: "string" },
  { name: "HARBORMASTER_AGENT_ENGINE", path: ["podman", "engine"], type: "string" },
  { name: "HARBORMASTER_AGENT_TARBALL_ROOT", path: ["tarball", "root"], type: "string" },
  { name: "HARBORMASTER_AGENT_HOOK_TIMEOUT_S", path: ["tarball", "hook_timeout_s"], type: "int" },
  { name: "HARBORMASTER_AGENT_REBOOT_REQUIRED_FILE", path: ["reboot", "required_file"], type: "string" },
  { name: "HARBORMASTER_AGENT_REBOOT_CHECK_COMMAND", path: ["reboot", "check_command"], type: "nullable-command" },
  { name: "HARBORMASTER_AGENT_REBOOT_COMMAND", path: ["reboot", "command"], type: "command" },
  { name: "HARBORMASTER_AGENT_REBOOT_CHECK_INTERVAL_S", path: ["reboot", "check_interval_s"], type: "int" },
  { name: "HARBORMASTER_AGENT_FLEETLOCK_URL", path: ["reboot", "fleetlock_url"], type: "nullable-string" },
  { name: "HARBORMASTER_AGENT_BINARY", path: ["self_update", "binary"], type: "nullable-string" },
  { name: "HARBORMASTER_AGENT_START_TIMEOUT_S", path: ["self_update", "start_timeout_s"], type: "int" },
  { name: "HARBORMASTER_AGENT_CRASH_BACKOFF_BASE_S", path: ["crash_backoff", "base_s"], type: "int" },
  { name: "HARBORMASTER_AGENT_CRASH_BACKOFF_CAP_S", path: ["crash_backoff", "cap_s"], type: "int" },
  { name: "HARBORMASTER_AGENT_CRASH_BACKOFF_STABLE_S", path: ["crash_backoff", "stable_s"], type: "int" },
];

export class ConfigError extends Error {
  override name = "ConfigError";
}

function envValue(raw: string, type: EnvValue): unknown {
  switch (type) {
    case "int":
      return /^\d+$/.test(raw.trim()) ? Number(raw.trim()) : raw;
    case "command":
      return splitCommand(raw);
    case "nullable-command":
      return raw.trim() === "" ? null : splitCommand(raw);
    case "nullable-string":
      return raw.trim() === "" ? null : raw;
    default:
      return raw;
  }
}

/** A command from the environment: a JSON array, or words split on spaces (no quoting). */
function splitCommand(raw: string): unknown {
  const t = raw.trim();
  if (t.startsWith("[")) {
    try {
      return JSON.parse(t);
    } catch {
      return t;
    }
  }
  return t.split(/\s+/).filter(Boolean);
}

function setPath(target: Record<string, unknown>, path: Path, v: unknown) {
  let at = target;
  for (const key of path.slice(0, -1)) {
    if (typeof at[key] !== "object" || at[key] === null) at[key] = {};
    at = at[key] as Record<string, unknown>;
  }
  at[path[path.length - 1]] = v;
}

export interface LoadedConfig {
  config: AgentConfig;
  /** The file read, or null when none existed (defaults and environment only). */
  file: string | null;
}

/**
 * Reads `file` (or the first default file that exists), applies the environment and
 * `overrides`, and validates the whole. Throws ConfigError naming the file and the bad keys.
 */
export function loadConfig(
  file: string | null,
  env: NodeJS.ProcessEnv = process.env,
  overrides: { state_dir?: string } = {},
): LoadedConfig {
  const explicit = file ?? env.HARBORMASTER_AGENT_CONFIG ?? null;
  const path = explicit ?? DEFAULT_CONFIG_FILES.find((f) => existsSync(f)) ?? null;
  let raw: Record<string, unknown> = {};
  if (path) {
    let text: string;
    try {
      text = readFileSync(path, "utf8");
    } catch (err) {
      // A named file that is missing is a mistake worth stopping for; the defaults are not.
      throw new ConfigError(`cannot read configuration ${path}: ${(err as Error).message}`);
    }
    try {
      const parsed = path.endsWith(".json") ? JSON.parse(text) : parseYaml(text);
      raw = parsed ?? {};
    } catch (err) {
      throw new ConfigError(
        `configuration ${path} is not valid ${path.endsWith(".json") ? "JSON" : "YAML"}: ${(err as Error).message}`,
      );
    }
    if (typeof raw !== "object" || Array.isArray(raw))
      throw new ConfigError(`configuration ${path} must be an object of settings`);
  }
  for (const o of ENV_OVERRIDES) {
    const v = env[o.name];
    if (v !== undefined) setPath(raw, o.path, envValue(v, o.type));
  }
  if (overrides.state_dir) raw.state_dir = overrides.state_dir;
  const result = AgentConfig.safeParse(raw);
  if (!result.success) {
    const problems = result.error.issues.map((i) => `${i.path.join(".") || "(top)"}: ${i.message}`).join("; ");
    throw new ConfigError(`configuration ${path ?? "(defaults and environment)"} is not valid: ${problems}`);
  }
  return { config: result.data, file: path };
}
