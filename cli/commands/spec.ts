/**
 * Fleets as code (docs/fleets-as-code.md): `hm diff`, `hm apply` and `hm export` over fleet specs — YAML (one
 * or more documents a file) or JSON, a file, a directory of them, or stdin. The server computes
 * every diff (POST …/spec:diff), so what is shown is what an apply would do, and the apply names
 * the fleet's state the diff was computed against (If-Match): a fleet changed in between is
 * refused, never overwritten unseen.
 */
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { extname, join, resolve } from "node:path";
import type { Command } from "commander";
import { parseAllDocuments, stringify } from "yaml";
import { apiErrorOf } from "../../agent/http.ts";
import { act, refusedBy, type Ctx } from "../context.ts";
import { Exit, readAll, type Io, type Output } from "../io.ts";

const SPEC_FILE = /\.(ya?ml|json)$/i;

interface SpecFile {
  /** Where it came from, for messages: the file (and document number, for several in one file). */
  source: string;
  fleet: string;
  spec: unknown;
}

interface DiffItem {
  path: string;
  op: "add" | "change" | "remove" | "unlisted";
  before: unknown;
  after: unknown;
  note?: string;
}

interface Diff {
  fleet: string;
  /** false: the fleet does not exist yet; applying the spec creates it. */
  exists: boolean;
  equal: boolean;
  etag: string | null;
  summary: Record<DiffItem["op"], number>;
  items: DiffItem[];
  replan: { scope: "none" | "roles" | "fleet"; roles: string[]; servers: number };
}

/** A spec file's documents; YAML is a superset of JSON, so one parser reads both. */
function documentsOf(text: string, source: string): SpecFile[] {
  const docs = parseAllDocuments(text);
  return docs
    .map((doc, i) => {
      if (doc.errors.length) throw new Exit(2, `${source}: ${doc.errors[0].message}`);
      const spec = doc.toJS() as unknown;
      const name = docs.length > 1 ? `${source}#${i + 1}` : source;
      return { spec, source: name };
    })
    .filter(({ spec }) => spec !== null && spec !== undefined)
    .map(({ spec, source: name }) => {
      const fleet = (spec as { fleet?: unknown }).fleet;
      if (typeof spec !== "object" || Array.isArray(spec) || typeof fleet !== "string") {
        throw new Exit(2, `${name}: not a fleet spec (an object with "fleet")`);
      }
      return { source: name, fleet, spec };
    });
}

/** `-f`: a file, a directory (its .yaml, .yml and .json files, by name) or `-` (stdin). */
async function readSpecs(io: Io, path: string): Promise<SpecFile[]> {
  if (path === "-") return documentsOf(await readAll(io.stdin), "stdin");
  const full = resolve(io.cwd, path);
  if (!existsSync(full)) throw new Exit(2, `${path}: no such file or directory`);
  const files = statSync(full).isDirectory()
    ? readdirSync(full)
        .filter((f) => SPEC_FILE.test(f))
        .sort()
        .map((f) => join(path, f))
    : [path];
  const specs = files.flatMap((f) => documentsOf(readFileSync(resolve(io.cwd, f), "utf8"), f));
  if (specs.length === 0) throw new Exit(2, `${path}: no fleet spec found`);
  return specs;
}

async function call<T>(
  ctx: Ctx,
  method: string,
  path: string,
  opts: { body?: unknown; headers?: Record<string, string> } = {},
) {
  const { url, token } = ctx.connection;
  const doFetch = ctx.io.fetch ?? fetch;
  const res = await doFetch(`${url.replace(/\/+$/, "")}${path}`, {
    method,
    headers: {
      Authorization: `Bearer ${token}`,
      ...(opts.body ? { "Content-Type": "application/json" } : {}),
      ...opts.headers,
    },
    body: opts.body ? JSON.stringify(opts.body) : undefined,
  });
  if (!res.ok) throw await apiErrorOf(res);
  return (await res.json()) as T;
}

const specPath = (fleet: string) => `/v1/fleets/${encodeURIComponent(fleet)}/spec`;
const prunePart = (prune?: boolean) => (prune ? "?prune=true" : "");

const compact = (v: unknown) => (v === null || v === undefined ? "" : JSON.stringify(v));
const isMap = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * The request body for a spec: the document as it is, and beside it the values of the environment
 * variables its webhooks' `secret_ref`s name (the document in git never holds a secret). `unset`:
 * variables not set here — such a webhook keeps its secret, and a new one is refused.
 */
function bodyOf(ctx: Ctx, s: SpecFile) {
  const hooks = (s.spec as { webhooks?: unknown }).webhooks;
  const secrets: Record<string, string> = {};
  const unset: string[] = [];
  for (const hook of isMap(hooks) ? Object.values(hooks) : []) {
    const env = isMap(hook) && isMap(hook.secret_ref) ? hook.secret_ref.env : undefined;
    if (typeof env !== "string") continue;
    const value = ctx.io.env[env];
    if (value) secrets[env] = value;
    else unset.push(env);
  }
  return { body: Object.keys(secrets).length ? { spec: s.spec, secrets } : s.spec, unset: [...new Set(unset)].sort() };
}

const diffOf = (ctx: Ctx, s: SpecFile, prune?: boolean) =>
  call<Diff>(ctx, "POST", `${specPath(s.fleet)}:diff${prunePart(prune)}`, { body: bodyOf(ctx, s).body });

/** A changed item as its changed fields (a reboot group's slots, say), or whole when it is not an object. */
function fieldChanges(path: string, before: unknown, after: unknown): [string, unknown, unknown][] {
  if (!isMap(before) || !isMap(after)) return [[path, before, after]];
  return [...new Set([...Object.keys(before), ...Object.keys(after)])]
    .filter((k) => compact(before[k]) !== compact(after[k]))
    .map((k) => [`${path}.${k}`, before[k], after[k]]);
}

/** One line per item: + add, - remove, ~ change (before → after), ? unlisted (left; --prune removes it). */
function printDiff(out: Output, s: SpecFile, d: Diff) {
  const c = out.c;
  if (d.equal) return out.line(`${c.bold(`fleet ${d.fleet}`)} (${s.source}): ${c.green("up to date")}`);
  const counts = (["add", "change", "remove", "unlisted"] as const)
    .filter((k) => d.summary[k])
    .map((k) => `${d.summary[k]} ${k}`);
  const created = d.exists ? "" : c.green(`new fleet, created by apply${counts.length ? "; " : ""}`);
  out.line(`${c.bold(`${d.exists ? "" : "+ "}fleet ${d.fleet}`)} (${s.source}): ${created}${counts.join(", ")}`);
  const style = { add: ["+", c.green], remove: ["-", c.red], change: ["~", c.yellow], unlisted: ["?", c.dim] } as const;
  for (const i of d.items) {
    const [sign, paint] = style[i.op];
    if (i.op === "change") {
      for (const [path, before, after] of fieldChanges(i.path, i.before, i.after))
        out.line(paint(`  ${sign} ${path}: ${compact(before)} → ${compact(after)}`));
    } else {
      // An add may land on something that is already there (a live server's labels): show what it
      // has now, or the line reads as if the spec's labels were all it will carry.
      const value =
        i.op === "add"
          ? i.before == null
            ? compact(i.after)
            : `${compact(i.before)} → ${compact(i.after)}`
          : `${compact(i.before)}${i.op === "unlisted" ? "  (not in the spec: left; --prune removes it)" : ""}`;
      out.line(paint(`  ${sign} ${i.path}: ${value}`));
    }
    if (i.note) out.line(c.dim(`      ${i.note}`));
  }
  if (d.replan.scope !== "none") {
    const why = d.replan.scope === "fleet" ? "the whole fleet" : `roles ${d.replan.roles.join(", ")}`;
    out.line(`  planner: re-plans ${d.replan.servers} server(s) (${why})`);
  }
}

/** An API refusal of one spec, with every problem it names; the other specs go on. */
function reportFailure(ctx: Ctx, s: SpecFile, err: unknown) {
  const e = err as {
    status?: number;
    code?: string;
    message?: string;
    details?: { problems?: { path: string; message: string }[] };
  };
  if (!e.code) throw err;
  ctx.io.stderr(`error: ${s.source} (fleet ${s.fleet}): ${e.code}: ${e.message}\n`);
  if ((e.status === 401 || e.status === 403) && ctx.resolved) ctx.io.stderr(`${refusedBy(ctx.resolved)}\n`);
  for (const p of e.details?.problems ?? []) ctx.io.stderr(`  ${p.path}: ${p.message}\n`);
}

async function runDiff(ctx: Ctx, o: { file: string; prune?: boolean }) {
  const specs = await readSpecs(ctx.io, o.file);
  const out = ctx.out;
  const results: (Diff & { source: string })[] = [];
  let failed = 0;
  for (const s of specs) {
    try {
      const d = await diffOf(ctx, s, o.prune);
      results.push({ ...d, source: s.source });
      if (!ctx.machine) printDiff(out, s, d);
    } catch (err) {
      failed++;
      reportFailure(ctx, s, err);
    }
  }
  if (ctx.machine) out.data(results, (r) => (r as { fleet?: string }).fleet);
  if (failed) throw new Exit(1, "");
  const differ = results.filter((d) => !d.equal).length;
  // Like diff(1): 0 when the fleets are what the specs say, 3 (a check that found something) when not.
  if (differ) throw new Exit(3, `${differ} of ${results.length} fleet(s) differ from their spec`);
}

async function runApply(ctx: Ctx, o: { file: string; prune?: boolean }) {
  const specs = await readSpecs(ctx.io, o.file);
  const out = ctx.out;
  const results: unknown[] = [];
  let failed = 0;
  for (const s of specs) {
    try {
      const d = await diffOf(ctx, s, o.prune);
      if (!ctx.machine) printDiff(out, s, d);
      if (d.exists && d.summary.add + d.summary.change + d.summary.remove === 0) {
        results.push({ ...d, source: s.source, changed: false });
        continue;
      }
      await ctx.confirm(d.exists ? `apply this to fleet ${s.fleet}?` : `create fleet ${s.fleet} from this spec?`);
      // The state the diff saw: that ETag, or (a fleet to create) no fleet at all — one created
      // meanwhile is refused (412), not overwritten unseen.
      const precondition: Record<string, string> = d.etag ? { "If-Match": d.etag } : { "If-None-Match": "*" };
      const { body, unset } = bodyOf(ctx, s);
      for (const env of unset)
        ctx.io.stderr(`note: ${s.source}: $${env} is not set: its webhooks keep their secret (a new one is refused)\n`);
      const applied = await call<
        Diff & {
          created: boolean;
          changed: boolean;
          planning: { servers: number; issued: number; remaining: boolean } | null;
          coordinator: { pending: boolean };
        }
      >(ctx, "PUT", `${specPath(s.fleet)}${prunePart(o.prune)}`, { body, headers: precondition });
      results.push({ ...applied, source: s.source });
      if (!ctx.machine) {
        const p = applied.planning;
        out.line(
          `  ${applied.created ? `created fleet ${s.fleet}` : "applied"}${p ? `; planner: ${p.issued} of ${p.servers} server(s) given a new generation${p.remaining ? " (more in the background)" : ""}` : ""}` +
            `${applied.coordinator.pending ? "; reboot groups on their way to the coordinator" : ""}`,
        );
      }
    } catch (err) {
      if (err instanceof Exit) throw err;
      failed++;
      reportFailure(ctx, s, err);
    }
  }
  if (ctx.machine) out.data(results, (r) => (r as { fleet?: string }).fleet);
  if (failed) throw new Exit(1, `${failed} spec(s) not applied`);
}

/** YAML for people; JSON with --json or a .json file. */
const render = (spec: unknown, json: boolean) =>
  json ? `${JSON.stringify(spec, null, 2)}\n` : stringify(spec, { lineWidth: 0 });

async function runExport(ctx: Ctx, fleets: string[], o: { to?: string }) {
  const specs = [];
  for (const fleet of fleets) specs.push({ fleet, spec: await call<unknown>(ctx, "GET", specPath(fleet)) });
  const json = !!ctx.machine;
  if (!o.to) {
    if (ctx.format === "name") return ctx.out.data(specs.map((s) => s.fleet));
    if (ctx.machine) return ctx.out.data(specs.length === 1 ? specs[0].spec : specs.map((s) => s.spec));
    return ctx.io.stdout(specs.map((s) => render(s.spec, false)).join("---\n"));
  }
  const target = resolve(ctx.io.cwd, o.to);
  if (existsSync(target) && statSync(target).isDirectory()) {
    for (const s of specs) writeFileSync(join(target, `${s.fleet}.${json ? "json" : "yaml"}`), render(s.spec, json));
    return ctx.out.note(`wrote ${specs.length} spec(s) to ${o.to}`);
  }
  if (specs.length > 1) throw new Exit(2, "several fleets export to a directory (-o DIR)");
  writeFileSync(target, render(specs[0].spec, json || extname(target).toLowerCase() === ".json"));
  ctx.out.note(`wrote ${o.to}`);
}

export function registerSpec(program: Command, io: Io) {
  program
    .command("diff")
    .description("what applying fleet specs would change (exit 0: up to date, 3: differences)")
    .requiredOption(
      "-f, --file <path>",
      "a spec file (YAML or JSON; several YAML documents allowed), a directory of them, or - for stdin",
    )
    .option("--prune", "list items the specs lack as removals (else as unlisted)")
    .action(act(io, (ctx, o) => runDiff(ctx, o)));
  program
    .command("apply")
    .description("apply fleet specs: shows each diff and asks first (unless --yes); all or nothing per fleet")
    .requiredOption("-f, --file <path>", "a spec file (YAML or JSON), a directory of them, or - for stdin")
    .option("--prune", "remove items the specs lack (else they are left as they are)")
    .action(act(io, (ctx, o) => runApply(ctx, o)));
  program
    .command("export <fleets...>")
    .description("write fleets as specs (YAML; JSON with --json or a .json file)")
    .option(
      "--to <path>",
      "a file, or a directory for one <fleet>.yaml each (default: stdout; -o is the output format)",
    )
    .action(act(io, (ctx, fleets: string[], o) => runExport(ctx, fleets, o)));
}
