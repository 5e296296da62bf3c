import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { stat } from "node:fs/promises";
import { resolve } from "node:path";
import { Readable } from "node:stream";
import { createGzip } from "node:zlib";
import { Option, type Command } from "commander";
import { Exit, type Io } from "../io.ts";
import { act } from "../context.ts";
import { VERSION } from "../version.ts";
import { AGENT_ARCHES, AGENT_OSES } from "../../src/domain/enums.ts";

/** The file's SHA-256, read as a stream (a build is ~100 MB). */
async function sha256Of(file: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

/** `hm agent publish FILE`: stores a build of harbormaster-agent, which install.sh then downloads. */
export function registerAgent(program: Command, io: Io) {
  const agent = program.command("agent").description("the harbormaster-agent builds this deployment serves");
  agent
    .command("publish <file>")
    .description("publish a build of harbormaster-agent for one os-arch (admin); install.sh downloads it from then on")
    .addOption(new Option("--os <os>", "its platform").choices(AGENT_OSES).default("linux"))
    .addOption(new Option("--arch <arch>", "its architecture").choices(AGENT_ARCHES).default("x64"))
    .option("--version <version>", "its version (default: hm's)")
    .action(
      act(io, async (ctx, file: string, o: { os: string; arch: string; version?: string }) => {
        const path = resolve(ctx.io.cwd, file);
        let size: number;
        try {
          const s = await stat(path);
          if (!s.isFile()) throw new Error("not a file");
          size = s.size;
        } catch (err) {
          throw new Exit(2, `cannot read ${file}: ${(err as Error).message}`);
        }
        const sha256 = await sha256Of(path);
        const body = Readable.toWeb(createReadStream(path).pipe(createGzip())) as ReadableStream<Uint8Array>;
        const target = `${o.os}-${o.arch}`;
        const build = await ctx.api.publishAgentBuild(target, { body, size, sha256, version: o.version ?? VERSION });
        if (ctx.machine) return ctx.out.data(build);
        ctx.out.fields([
          ["target", target],
          ["version", build.version],
          ["sha256", build.sha256],
          ["size", build.size],
          ["url", build.url],
        ]);
      }),
    );
}
