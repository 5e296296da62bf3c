// `npm run build:agent`: harbormaster-agent as one executable for hosts without Node, and a .deb.
//
// The executable is a Node single executable application (SEA): agent/cli/main.ts bundled into
// one CommonJS file by esbuild, turned into a SEA blob by the pinned Node (node_modules/node, the
// project's Node 24), and injected with postject into a copy of that same Node binary. Why SEA and
// not another packer: it is Node's own mechanism (no patched runtime, nothing downloaded at build
// time, the runtime is exactly the one the tests run on), so it builds offline from what npm
// installed. Only linux-x64 is built: an arm64 executable needs an arm64 Node binary, which the
// pinned `node` package installs for the machine it is installed on only (see the report in
// docs/host-agents.md, "Building").
//
//   node scripts/agent/build.ts [--version V] [--out DIR] [--no-deb]
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  chmodSync,
  copyFileSync,
  createReadStream,
  mkdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { join, resolve } from "node:path";
import { build } from "esbuild";

const root = resolve(import.meta.dirname, "../..");
/** The Node the executable is made of: the pinned one, whatever Node runs this script. */
export const PINNED_NODE = join(root, "node_modules/node/bin/node");
const SEA_FUSE = "NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2";

export interface BuildOptions {
  /** The version the executable reports (default: package.json's). */
  version?: string;
  /** Where the outputs go (default dist/agent). */
  outDir?: string;
  /** Also the .deb (default true). */
  deb?: boolean;
  log?: (line: string) => void;
}

export interface BuildResult {
  version: string;
  binary: string;
  sha256: string;
  size: number;
  deb: string | null;
}

function sh(cmd: string, args: string[]) {
  const r = spawnSync(cmd, args, { encoding: "utf8", maxBuffer: 64 * 2 ** 20 });
  if (r.status !== 0)
    throw new Error(`${cmd} ${args.join(" ")} failed (${r.status ?? r.signal}):\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

export async function sha256File(path: string): Promise<string> {
  const h = createHash("sha256");
  for await (const chunk of createReadStream(path)) h.update(chunk as Buffer);
  return h.digest("hex");
}

export function packageVersion(): string {
  return (JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { version: string }).version;
}

export async function buildAgent(opts: BuildOptions = {}): Promise<BuildResult> {
  const version = opts.version ?? packageVersion();
  if (!/^[0-9][A-Za-z0-9.+~-]*$/.test(version)) throw new Error(`not a version a .deb can carry: ${version}`);
  const log = opts.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const out = resolve(opts.outDir ?? join(root, "dist/agent"));
  const work = join(out, `build-${version}`);
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });

  // 1. One CommonJS file (what a SEA runs), the version baked in.
  const bundle = join(work, "harbormaster-agent.cjs");
  await build({
    entryPoints: [join(root, "agent/cli/main.ts")],
    bundle: true,
    platform: "node",
    format: "cjs",
    target: "node24",
    outfile: bundle,
    minify: true,
    legalComments: "none",
    logLevel: "warning",
    define: {
      "process.env.HARBORMASTER_AGENT_BUILD_VERSION": JSON.stringify(version),
      "import.meta.dirname": "__dirname",
    },
  });

  // 2. The SEA blob, made by the Node it will run in.
  const blob = join(work, "sea-prep.blob");
  const seaConfig = join(work, "sea-config.json");
  // --optimize-for-size takes a few MB off an idle agent's resident memory (an agent mostly
  // waits; what it does at length, hashing and unpacking, runs in native code). The blob is made
  // under the same flag, or V8 would reject its code cache at start.
  const V8_FLAGS = ["--optimize-for-size"];
  writeFileSync(
    seaConfig,
    JSON.stringify({
      main: bundle,
      output: blob,
      disableExperimentalSEAWarning: true,
      useCodeCache: true,
      execArgv: V8_FLAGS,
    }),
  );
  sh(PINNED_NODE, [...V8_FLAGS, "--experimental-sea-config", seaConfig]);

  // 3. A copy of that Node with the blob injected.
  const binary = join(out, "harbormaster-agent-linux-x64");
  const staged = join(work, "harbormaster-agent");
  copyFileSync(PINNED_NODE, staged);
  chmodSync(staged, 0o755);
  // The pinned binary carries its symbols and debug information (18 MB); hosts have no use for them.
  if (spawnSync("strip", ["--version"]).status === 0) sh("strip", ["--strip-all", staged]);
  // postject's CLI in a child process: its ELF library prints warnings about the binary's
  // notes that are no use to anyone (shown only when the injection fails).
  sh(PINNED_NODE, [
    join(root, "node_modules/postject/dist/cli.js"),
    staged,
    "NODE_SEA_BLOB",
    blob,
    "--sentinel-fuse",
    SEA_FUSE,
  ]);
  const check = spawnSync(staged, ["version"], { encoding: "utf8" });
  if (check.status !== 0 || !check.stdout.includes(version) || check.stderr.trim()) {
    throw new Error(`the built executable does not run cleanly:\n${check.stdout}\n${check.stderr}`);
  }
  rmSync(binary, { force: true });
  copyFileSync(staged, binary);
  chmodSync(binary, 0o755);
  const sha256 = await sha256File(binary);
  writeFileSync(`${binary}.sha256`, `${sha256}  harbormaster-agent-linux-x64\n`);
  const size = statSync(binary).size;
  log(`built ${binary} (${version}, ${(size / 2 ** 20).toFixed(1)} MiB, sha256 ${sha256})`);

  // 4. The .deb: the executable, the unit, a default configuration, the maintainer scripts.
  let deb: string | null = null;
  if (opts.deb !== false) {
    const pkg = join(work, "deb");
    const put = (path: string, from: string, mode: number) => {
      mkdirSync(join(pkg, path, ".."), { recursive: true });
      copyFileSync(from, join(pkg, path));
      chmodSync(join(pkg, path), mode);
    };
    put("usr/bin/harbormaster-agent", staged, 0o755);
    put(
      "lib/systemd/system/harbormaster-agent.service",
      join(root, "agent/packaging/harbormaster-agent.service"),
      0o644,
    );
    put("etc/harbormaster-agent/config.yaml", join(root, "agent/packaging/config.yaml"), 0o644);
    for (const script of ["postinst", "prerm", "postrm"])
      put(`DEBIAN/${script}`, join(root, "agent/packaging", script), 0o755);
    writeFileSync(join(pkg, "DEBIAN/conffiles"), "/etc/harbormaster-agent/config.yaml\n");
    const installedKb = Math.ceil(size / 1024) + 8;
    writeFileSync(
      join(pkg, "DEBIAN/control"),
      [
        "Package: harbormaster-agent",
        `Version: ${version}`,
        "Architecture: amd64",
        "Maintainer: Harbormaster <harbormaster@localhost>",
        `Installed-Size: ${installedKb}`,
        "Section: admin",
        "Priority: optional",
        "Recommends: podman",
        "Description: Harbormaster host agent",
        " Joins a Harbormaster fleet, runs the agents its desired config names (podman",
        " containers, tarballs with hooks), reports what the machine really runs, and",
        " coordinates the host's reboots through the fleet's FleetLock groups.",
        "",
      ].join("\n"),
    );
    deb = join(out, `harbormaster-agent_${version}_amd64.deb`);
    rmSync(deb, { force: true });
    // gzip: a 40 MB package in seconds on a small machine, where xz would take minutes.
    sh("dpkg-deb", ["--root-owner-group", "-Zgzip", "--build", pkg, deb]);
    log(`built ${deb} (${(statSync(deb).size / 2 ** 20).toFixed(1)} MiB)`);
  }
  rmSync(work, { recursive: true, force: true });
  return { version, binary, sha256, size, deb };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const args = process.argv.slice(2);
  const value = (name: string) => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : undefined;
  };
  await buildAgent({ version: value("--version"), outDir: value("--out"), deb: !args.includes("--no-deb") });
}
