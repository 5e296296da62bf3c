/**
 * Every walk-through in the docs runs as written (docs/operator-guide.md): the ```sh blocks marked
 * `<!-- walkthrough: NAME -->` are extracted from README.md and docs/*.md (so they cannot drift
 * from what is tested) and run with bash -e -o pipefail against the private server, twice in a
 * row, given only PORT (as a user who set it for `npm start`) and the server's admin token. The
 * first run uses the checkout's `npm run hm`, the second an `hm` on PATH (as after `npm link`).
 * Every other ```sh block must say why it is not a walk-through.
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
  const files = ["README.md", ...readdirSync(join(root, "docs")).filter((f) => f.endsWith(".md")).map((f) => `docs/${f}`)];
  const out: Block[] = [];
  for (const file of files) {
    const lines = readFileSync(join(root, file), "utf8").split("\n");
    for (let i = 0; i < lines.length; i++) {
      if (lines[i].trim() !== "```sh") continue;
      let j = i - 1;
      while (j >= 0 && lines[j].trim() === "") j--;
      const marker = j >= 0 && /^<!-- (walkthrough: [\w-]+|not a walkthrough: .+) -->$/.test(lines[j].trim()) ? lines[j].trim() : null;
      const end = lines.indexOf("```", i + 1);
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
writeFileSync(join(linked, "hm"), `#!/bin/sh\nexec node ${JSON.stringify(join(root, "bin/hm.mjs"))} "$@"\n`);
chmodSync(join(linked, "hm"), 0o755);

function run(code: string, withLinkedHm: boolean) {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith("HM_")) env[k] = v;
  Object.assign(env, {
    PORT: new URL(url).port,
    HM_TOKEN: admin,
    HM_CONFIG: join(linked, "no-config.json"),
    NO_COLOR: "1",
    PATH: withLinkedHm ? `${linked}:${process.env.PATH}` : (process.env.PATH ?? ""),
  });
  return spawnSync("bash", ["-e", "-o", "pipefail", "-c", code], { cwd: root, env, encoding: "utf8", timeout: 240_000 });
}

describe("the docs' walk-throughs", () => {
  it("every sh block in the docs is a walk-through or says why it is not", () => {
    expect(walkthroughs.length).toBeGreaterThanOrEqual(6);
    expect(blocks.filter((b) => !b.marker).map((b) => `${b.file}:${b.line}`)).toEqual([]);
    expect(new Set(walkthroughs.map((w) => w.name)).size).toBe(walkthroughs.length);
  });

  for (const w of walkthroughs) {
    it(`${w.name} (${w.file}:${w.line}) runs as written, twice in a row, with the PORT given`, { timeout: 600_000 }, () => {
      for (const linkedHm of [false, true]) {
        const r = run(w.code, linkedHm);
        const where = `${w.name}, run ${linkedHm ? 2 : 1}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`;
        if (process.env.HM_TEST_DEBUG) console.log(where);
        expect(r.status, where).toBe(0);
        expect(r.stdout + r.stderr, where).not.toMatch(/internal_error|undefined|at async |TypeError|ReferenceError/);
      }
    });
  }
});
