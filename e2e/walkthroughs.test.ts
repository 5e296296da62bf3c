/**
 * Every walk-through in the docs runs exactly as written: the ```sh blocks marked
 * `<!-- walkthrough: NAME -->` are extracted from README.md and docs/*.md (so they cannot drift
 * from what is tested) and run unchanged with bash -e -o pipefail against the private server,
 * twice in a row, in a shell with nothing exported for Harbormaster (no PORT, no HM_URL, no
 * HM_TOKEN): as in a second terminal beside `npm start`, they find the server through its local
 * server record. The record is the private server's, named by HM_LOCAL_RECORD, so a developer's
 * own .wrangler/hm-local.json is neither read nor overwritten. The first run uses the checkout's
 * `npm run hm`, the second an `hm` on PATH (as after `npm link`). Every other ```sh block must
 * say why it is not a walk-through.
 */
import { spawnSync } from "node:child_process";
import { chmodSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { describe, expect, inject, it } from "vitest";

const root = resolve(import.meta.dirname, "..");
const url = inject("hmUrl");
const admin = inject("hmAdmin");

interface Block {
  file: string;
  line: number;
  marker: string | null;
  code: string;
}

function shBlocks(): Block[] {
  const files = [
    "README.md",
    ...readdirSync(join(root, "docs"))
      .filter((f) => f.endsWith(".md"))
      .map((f) => `docs/${f}`),
  ];
  const out: Block[] = [];
  for (const file of files) {
    const lines = readFileSync(join(root, file), "utf8").split("\n");
    for (let i = 0; i < lines.length; i++) {
      if (lines[i].trim() !== "```sh") continue;
      let j = i - 1;
      while (j >= 0 && lines[j].trim() === "") j--;
      const marker =
        j >= 0 && /^<!-- (walkthrough: [\w-]+|not a walkthrough: .+) -->$/.test(lines[j].trim())
          ? lines[j].trim()
          : null;
      // A fence may be indented (a block inside a list item).
      const end = lines.findIndex((l, k) => k > i && l.trim() === "```");
      out.push({ file, line: i + 1, marker, code: lines.slice(i + 1, end).join("\n") });
      i = end;
    }
  }
  return out;
}

const blocks = shBlocks();
const walkthroughs = blocks
  .filter((b) => b.marker?.startsWith("<!-- walkthrough:"))
  .map((b) => ({ ...b, name: /walkthrough: ([\w-]+)/.exec(b.marker!)![1] }));

/** `hm` on PATH, as `npm link` puts it there. */
const linked = mkdtempSync(join(tmpdir(), "hm-linked-"));
/** What `npm start` would have recorded for this server (cli/local.ts). */
const record = join(linked, "hm-local.json");
writeFileSync(record, JSON.stringify({ url, token: admin }), { mode: 0o600 });
writeFileSync(join(linked, "hm"), `#!/bin/sh\nexec node ${JSON.stringify(join(root, "bin/hm.mjs"))} "$@"\n`);
chmodSync(join(linked, "hm"), 0o755);

function run(code: string, withLinkedHm: boolean) {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env))
    if (v !== undefined && !k.startsWith("HM_") && k !== "PORT" && k !== "ADMIN_TOKEN") env[k] = v;
  Object.assign(env, {
    HM_LOCAL_RECORD: record,
    // Not the developer's contexts: a current one would win over the record.
    HM_CONFIG: join(linked, "no-config.json"),
    NO_COLOR: "1",
    PATH: withLinkedHm ? `${linked}:${process.env.PATH}` : (process.env.PATH ?? ""),
  });
  return spawnSync("bash", ["-e", "-o", "pipefail", "-c", code], {
    cwd: root,
    env,
    encoding: "utf8",
    timeout: 240_000,
  });
}

describe("the docs' walk-throughs", () => {
  it("every sh block in the docs is a walk-through or says why it is not", () => {
    expect(walkthroughs.length).toBeGreaterThanOrEqual(6);
    expect(blocks.filter((b) => !b.marker).map((b) => `${b.file}:${b.line}`)).toEqual([]);
    expect(new Set(walkthroughs.map((w) => w.name)).size).toBe(walkthroughs.length);
  });

  for (const w of walkthroughs) {
    it(
      `${w.name} (${w.file}:${w.line}) runs exactly as written, twice in a row, with nothing exported`,
      { timeout: 600_000 },
      () => {
        for (const linkedHm of [false, true]) {
          const r = run(w.code, linkedHm);
          const where = `${w.name}, run ${linkedHm ? 2 : 1}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`;
          if (process.env.HM_TEST_DEBUG) console.log(where);
          expect(r.status, where).toBe(0);
          expect(r.stdout + r.stderr, where).not.toMatch(/internal_error|undefined|at async |TypeError|ReferenceError/);
        }
      },
    );
  }
});
