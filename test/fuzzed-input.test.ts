/**
 * Every operation of the OpenAPI document (enumerated, so a route added later is covered) with the
 * right credential and wrong input: bodies of the wrong type, truncated, nested 100,000 deep, with
 * `__proto__`, duplicate keys, NUL, lone surrogates, numbers beyond a double, 2 MB strings, 10 MB,
 * invalid UTF-8, the wrong Content-Type; path parameters and query values of every wrong kind. Each
 * is refused with a 4xx in the error shape (the contract check in test/helpers.ts fails any answer
 * the document does not describe, a 500 first), and nothing changes: D1 and the fleet's objects are
 * compared before and after each walk.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { call } from "./helpers";
import {
  errorShapeProblem,
  fill,
  fingerprint,
  operations,
  walkWorld,
  type Operation,
  type WalkWorld,
} from "./walk-helpers";

let w: WalkWorld;
beforeAll(async () => {
  w = await walkWorld();
});

/** The credential each operation takes, so that only the input can be refused. */
function tokenFor(w: WalkWorld, path: string) {
  if (path.startsWith("/fleetlock/") || path.startsWith("/v1/sso/cli/")) return null;
  if (path === "/v1/agent/enroll") return w.enrollment.token;
  if (path.startsWith("/v1/agent/") && !path.startsWith("/v1/agent/builds") && !path.startsWith("/v1/agent/download"))
    return w.server.token;
  return undefined; // the admin token
}

const deep = (n: number) => "[".repeat(n) + "]".repeat(n);

/** [name, raw body, Content-Type (undefined: JSON; null: none)] */
const BODIES: [string, string | Uint8Array, string | null | undefined][] = [
  ["null", "null", undefined],
  ["an array", "[]", undefined],
  ["a string", '"x"', undefined],
  ["a number", "1", undefined],
  ["empty", "", undefined],
  ["truncated", '{"name":', undefined],
  ["nested 100,000 deep", deep(100_000), undefined],
  ["objects nested 50,000 deep", '{"a":'.repeat(50_000) + "1" + "}".repeat(50_000), undefined],
  ["__proto__ and constructor", '{"__proto__":{"scope":"admin"},"constructor":{"prototype":{"x":1}}}', undefined],
  ["duplicate keys", '{"id":"a","id":"b","name":"x","name":{"y":1},"zz-unknown":1}', undefined],
  [
    "NUL and a lone surrogate",
    JSON.stringify({ id: "a\u0000b", name: "\ud800", hostname: "a\u0000.example.com" }),
    undefined,
  ],
  ["numbers beyond a double", '{"generation":1e400,"slots":-1e400,"max_uses":18446744073709551617}', undefined],
  ["2 MB strings", JSON.stringify({ id: "x".repeat(2_000_000), name: "y".repeat(2_000_000) }), undefined],
  ["10 MB", JSON.stringify({ pad: "x".repeat(10 * 1024 * 1024) }), undefined],
  ["invalid UTF-8", new Uint8Array([0xff, 0xfe, 0x7b, 0x7d]), undefined],
  ["text/plain", '{"zz-unknown":1}', "text/plain"],
  ["no Content-Type", '{"zz-unknown":1}', null],
  ["a charset not UTF-8", "{}", "application/json; charset=utf-16"],
  ["a form", "a=b", "application/x-www-form-urlencoded"],
];

/** POSTs whose body is optional and `{}`-like bodies may do their work: walked with input that cannot be right. */
const takesBody = (op: any) => !!(op.requestBody?.content?.["application/json"] || op.requestBody?.content?.["*/*"]);

async function walk(label: string, ops: Operation[], each: (o: Operation) => AsyncGenerator<[string, Promise<any>]>) {
  const before = await fingerprint(w);
  const problems: string[] = [];
  let sent = 0;
  for (const o of ops) {
    for await (const [what, pending] of each(o)) {
      const where = `${what}: ${o.method} ${o.path}`;
      let res: any;
      try {
        res = await pending;
      } catch (err) {
        problems.push(`${where}: ${String(err).slice(0, 300)}`);
        continue;
      }
      sent++;
      if (res.status < 400 || res.status >= 500)
        problems.push(`${where} → ${res.status} ${JSON.stringify(res.json).slice(0, 200)}`);
      else {
        const shape = errorShapeProblem(o.path, res.json);
        if (shape) problems.push(`${where} → ${res.status}: ${shape}`);
      }
    }
  }
  expect(problems).toEqual([]);
  expect(JSON.parse(await fingerprint(w)), `${label}: a refused request changed something`).toEqual(JSON.parse(before));
  console.info(`fuzzed input (${label}): ${sent} requests over ${ops.length} operations, all refused, nothing changed`);
  return sent;
}

describe("every operation with fuzzed input", () => {
  it("refuses bad bodies with a 4xx in the error shape and changes nothing", async () => {
    const ops = (await operations()).filter((o) => takesBody(o.op));
    expect(ops.length).toBeGreaterThan(25);
    const sent = await walk("bodies", ops, async function* ({ method, path }) {
      for (const [name, raw, type] of BODIES) {
        const headers: Record<string, string> = path.startsWith("/fleetlock/") ? { "fleet-lock-protocol": "true" } : {};
        if (type === undefined) headers["Content-Type"] = "application/json";
        else if (type !== null) headers["Content-Type"] = type;
        yield [name, call(method, fill(w, path), { token: tokenFor(w, path), rawBody: raw as string, headers })];
      }
    });
    expect(sent).toBeGreaterThan(500);
  }, 300_000);

  it("refuses bad path parameters and query values with a 4xx in the error shape and changes nothing", async () => {
    const ops = await operations();
    const params = [
      "x".repeat(5000),
      "%00",
      "%2F..%2F",
      "%E2%80%AE",
      "%F0%9F%98%80",
      "%ff",
      "__proto__",
      "-1",
      "1e999",
      "%20",
    ];
    // Numbers as JavaScript reads them loosely (" 1", "0x10") are taken; these are not numbers in range.
    const numbers = ["x".repeat(10_000), "-1", "1e999", "%00", "%ff", "9007199254740993", "1.5", "NaN", "Infinity"];
    const sent = await walk("parameters", ops, async function* ({ method, path, op }) {
      const token = tokenFor(w, path);
      const headers: Record<string, string> = path.startsWith("/fleetlock/") ? { "fleet-lock-protocol": "true" } : {};
      // A body the route may take, so that only the parameter can be refused; never one that does work.
      const body =
        method === "GET" || method === "DELETE"
          ? {}
          : { rawBody: '{"zz-unknown":1}', headers: { ...headers, "Content-Type": "application/json" } };
      for (const name of [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1])) {
        for (const value of params) {
          // A FleetLock key is checked after the body, which is refused first here as well.
          yield [
            `{${name}}=${value.slice(0, 12)}`,
            call(method, fill(w, path, { [name]: value }), { token, headers, ...body }),
          ];
        }
      }
      if (method !== "GET" || path === "/v1/agent/channel") return;
      for (const p of (op.parameters ?? []).filter((p: any) => p.in === "query")) {
        const schema = p.schema ?? {};
        const numeric = schema.type === "integer" || schema.type === "number";
        // Free text (a name, an image) takes anything; a typed value takes none of these.
        const wrong = numeric
          ? numbers
          : schema.enum || schema.type === "boolean"
            ? [...numbers, "", "__proto__", "constructor"]
            : schema.pattern || schema.format
              ? ["x".repeat(10_000), "%00", "a%0Ab"]
              : [];
        for (const value of wrong) {
          yield [`?${p.name}=${value.slice(0, 12)}`, call("GET", `${fill(w, path)}?${p.name}=${value}`, { token })];
        }
      }
    });
    expect(sent).toBeGreaterThan(1000);
  }, 300_000);
});
