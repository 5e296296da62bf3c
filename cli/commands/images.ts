import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { stat } from "node:fs/promises";
import { Readable } from "node:stream";
import { SingleBar } from "cli-progress";
import { Option, type Command } from "commander";
import { ApiError, type Image } from "../api.ts";
import { act, type Ctx } from "../context.ts";
import { Exit, type Io } from "../io.ts";
import { UPLOADED_IMAGE_KINDS } from "../../src/domain/images.ts";

/** The sha256 of a file, read once as a stream. */
async function fileDigest(file: string) {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
  return `sha256:${hash.digest("hex")}`;
}

const bytes = (n: number) =>
  n >= 1024 ** 3
    ? `${(n / 1024 ** 3).toFixed(2)} GiB`
    : n >= 1024 ** 2
      ? `${(n / 1024 ** 2).toFixed(1)} MiB`
      : `${n} B`;
const shortDigest = (d: string) => d.slice(0, 19);

/** A part is tried this many times (a dropped connection); then the push stops, and running it again resumes. */
const PART_ATTEMPTS = 3;

/**
 * Uploads the parts the server has not received yet: registering again answers the image with
 * the parts already there, so a push run again after an interruption sends only the rest.
 */
async function upload(ctx: Ctx, image: Image, file: string) {
  const up = image.upload;
  if (!up) return image;
  const todo = Array.from({ length: up.parts }, (_, i) => i + 1).filter((p) => !up.received.includes(p));
  const sizeOf = (p: number) => (p < up.parts ? up.part_size : image.size - up.part_size * (up.parts - 1));
  const already = up.received.reduce((n, p) => n + sizeOf(p), 0);
  if (up.received.length && !ctx.machine)
    ctx.out.note(`resuming: ${up.received.length} of ${up.parts} parts already uploaded`);
  const bar =
    ctx.io.interactive && !ctx.machine
      ? new SingleBar({ format: " {bar} {percentage}% | {done} of {size} | part {part}/{parts}", hideCursor: true })
      : null;
  let sent = already;
  bar?.start(image.size, sent, { done: bytes(sent), size: bytes(image.size), part: 0, parts: up.parts });
  try {
    for (const part of todo) {
      const start = (part - 1) * up.part_size;
      const length = sizeOf(part);
      for (let attempt = 1; ; attempt++) {
        try {
          const stream = Readable.toWeb(
            createReadStream(file, { start, end: start + length - 1 }),
          ) as ReadableStream<Uint8Array>;
          await ctx.api.putImagePart(image.id, part, stream, length);
          break;
        } catch (err) {
          if (err instanceof ApiError || attempt >= PART_ATTEMPTS) throw err;
        }
      }
      sent += length;
      if (bar) bar.update(sent, { done: bytes(sent), part, parts: up.parts });
      else if (!ctx.machine) ctx.out.note(`part ${part}/${up.parts} uploaded (${bytes(sent)} of ${bytes(image.size)})`);
    }
  } finally {
    bar?.stop();
  }
  return ctx.api.completeImage(image.id);
}

export function registerImages(program: Command, io: Io) {
  const images = program
    .command("images")
    .description("the image catalog: images desired configs, channels and rollouts name");

  images
    .command("push <name> <version> [file]")
    .description("register an image and upload FILE (resumes an interrupted upload), or register --ref REF")
    .addOption(new Option("--kind <kind>", "what FILE is").choices(UPLOADED_IMAGE_KINDS).default("oci-archive"))
    .option("--ref <ref>", "an image in a registry, pinned by digest (registry/org/x@sha256:…); nothing is uploaded")
    .option("--size <bytes>", "with --ref: the image's size as the registry gives it", "0")
    .option("--label <key=value...>", "a label (repeatable)")
    .option("--description <text>", "what it is")
    .action(
      act(
        io,
        async (
          ctx,
          name: string,
          version: string,
          file: string | undefined,
          o: {
            kind: (typeof UPLOADED_IMAGE_KINDS)[number];
            ref?: string;
            size: string;
            label?: string[];
            description?: string;
          },
        ) => {
          const labels = Object.fromEntries(
            (o.label ?? []).map((l) => {
              const eq = l.indexOf("=");
              if (eq < 1) throw new Exit(2, `--label ${l}: expected key=value`);
              return [l.slice(0, eq), l.slice(eq + 1)];
            }),
          );
          const common = { name, version, labels, ...(o.description ? { description: o.description } : {}) };
          let image: Image;
          if (o.ref) {
            if (file) throw new Exit(2, "give FILE or --ref, not both");
            const m = /@(sha256:[0-9a-f]{64})$/.exec(o.ref);
            if (!m) throw new Exit(2, "--ref must be pinned by digest: registry/org/x@sha256:<64 hex>");
            image = await ctx.api.registerImage({
              ...common,
              kind: "oci-ref",
              ref: o.ref,
              digest: m[1],
              size: Number(o.size),
            });
          } else {
            if (!file) throw new Exit(2, "give the FILE to upload, or --ref REF");
            const size = (
              await stat(file).catch(() => {
                throw new Exit(2, `cannot read ${file}`);
              })
            ).size;
            if (!ctx.machine) ctx.out.note(`hashing ${file} (${bytes(size)})…`);
            const digest = await fileDigest(file);
            image = await upload(ctx, await ctx.api.registerImage({ ...common, kind: o.kind, digest, size }), file);
          }
          if (ctx.machine) return ctx.out.data(image);
          ctx.out.line(
            `Image ${image.name} ${image.version} ${image.state}: ${image.id} (${image.kind}, ${image.digest}, ${bytes(image.size)})`,
          );
        },
      ),
    );

  images
    .command("ls", { isDefault: true })
    .alias("list")
    .description("the catalog")
    .option("--name <name>", "only this name")
    .option("--version <version>", "only this version")
    .action(
      act(io, async (ctx, o: { name?: string; version?: string }) => {
        const items = await ctx.api.listImages({ name: o.name, version: o.version });
        if (ctx.machine) return ctx.out.data(items);
        ctx.out.table(
          ["ID", "NAME", "VERSION", "KIND", "DIGEST", "SIZE", "STATE", "CREATED"],
          items.map((i) => [
            i.id,
            i.name,
            i.version,
            i.kind,
            shortDigest(i.digest),
            bytes(i.size),
            i.state,
            i.created_at,
          ]),
          "(no images)",
        );
      }),
    );

  images
    .command("show <id>")
    .description("one image and who wants it")
    .action(
      act(io, async (ctx, id: string) => {
        const i = await ctx.api.getImage(id);
        if (ctx.machine) return ctx.out.data(i);
        const users = i.used_by;
        ctx.out.line(`${i.name} ${i.version}  ${i.id}`);
        ctx.out.line(`  kind: ${i.kind}   state: ${i.state}   size: ${bytes(i.size)}`);
        ctx.out.line(`  digest: ${i.digest}`);
        if (i.ref) ctx.out.line(`  ref: ${i.ref}`);
        if (i.upload) ctx.out.line(`  upload: ${i.upload.received.length} of ${i.upload.parts} parts received`);
        for (const [k, v] of Object.entries(i.labels)) ctx.out.line(`  label ${k}=${v}`);
        if (users) {
          ctx.out.line(
            `  used by: ${users.channels.length} channel(s), ${users.rollouts.length} live rollout(s), ${users.servers.length} server(s)`,
          );
          for (const c of users.channels) ctx.out.line(`    channel ${c.fleet}/${c.agent}`);
          for (const r of users.rollouts) ctx.out.line(`    rollout ${r.id} (${r.state})`);
          for (const s of users.servers) ctx.out.line(`    server ${s.fleet}/${s.hostname}`);
        }
      }),
    );

  images
    .command("rm <id>")
    .description("remove an image and its bytes (refused while anything wants it)")
    .action(
      act(io, async (ctx, id: string) => {
        await ctx.confirm(`Remove image ${id} and its bytes?`);
        const i = await ctx.api.deleteImage(id);
        if (ctx.machine) return ctx.out.data(i);
        ctx.out.line(`Removed image ${i.name} ${i.version} (${i.id}).`);
      }),
    );
}
