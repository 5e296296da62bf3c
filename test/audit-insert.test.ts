import { env } from "cloudflare:test";
import { sql } from "drizzle-orm";
import { integer, sqliteTable, text } from "drizzle-orm/sqlite-core";
import { describe, expect, it } from "vitest";
import { auditInsert, auditInsertIf } from "../src/db/audit";
import { getDb } from "../src/db/client";
import { insertWhere } from "../src/db/insert-where";

const rowsOf = async (target: string) =>
  (
    await env.DB.prepare(
      "SELECT at, actor, action, target, details, event_id FROM audit_log WHERE target = ? ORDER BY id",
    )
      .bind(target)
      .all()
  ).results;

describe("auditInsertIf", () => {
  it("fills each column by its name: the row reads back as auditInsert writes the same entry", async () => {
    const db = getDb(env.DB);
    const target = `test:${crypto.randomUUID()}`;
    const entry = { actor: "token:a", action: "thing.change", target, details: { why: "because", n: 2 } };
    await db.batch([auditInsert(db, entry, 1_000), auditInsertIf(db, entry, sql`1 = 1`, 1_000)]);
    const [plain, conditional] = await rowsOf(target);
    expect(conditional).toEqual(plain);
    expect(conditional).toEqual({
      at: 1_000,
      actor: "token:a",
      action: "thing.change",
      target,
      details: JSON.stringify({ why: "because", n: 2 }),
      event_id: null,
    });
  });

  it("writes nothing when its condition does not hold, and null details when the entry has none", async () => {
    const db = getDb(env.DB);
    const target = `test:${crypto.randomUUID()}`;
    await db.batch([
      auditInsertIf(db, { actor: "a", action: "no", target }, sql`1 = 0`, 1),
      auditInsertIf(db, { actor: "a", action: "yes", target }, sql`1 = 1`, 2),
    ]);
    expect(await rowsOf(target)).toEqual([{ at: 2, actor: "a", action: "yes", target, details: null, event_id: null }]);
  });
});

// A table whose schema lists its columns in another order than the database holds them, with a
// column the insert does not name: what a column added or moved later looks like.
const scratch = sqliteTable("insert_where_scratch", {
  extra: text("extra").notNull().default("kept"),
  note: text("note"),
  id: integer("id").primaryKey({ autoIncrement: true }),
  tags: text("tags", { mode: "json" }).$type<string[]>(),
  name: text("name").notNull(),
});

describe("insertWhere", () => {
  it("puts each value in the column of its name, and a column not given takes its default", async () => {
    await env.DB.exec(
      "CREATE TABLE IF NOT EXISTS insert_where_scratch (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, note TEXT, tags TEXT, extra TEXT NOT NULL DEFAULT 'x')",
    );
    const db = getDb(env.DB);
    await db.batch([
      insertWhere(db, scratch, { name: "n", note: "a note", tags: ["t"] }, sql`1 = 1`),
      insertWhere(db, scratch, { name: "skipped" }, sql`1 = 0`),
    ]);
    const rows = (await env.DB.prepare("SELECT name, note, tags, extra FROM insert_where_scratch").all()).results;
    expect(rows).toEqual([{ name: "n", note: "a note", tags: '["t"]', extra: "kept" }]);
  });
});

// Defaults drizzle computes in JavaScript: a regular insert calls them, and so must insertWhere.
const computed = sqliteTable("insert_where_computed", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  name: text("name").notNull(),
  token: text("token")
    .notNull()
    .$defaultFn(() => "made-by-default-fn"),
  stamped: text("stamped").$onUpdate(() => "made-by-on-update"),
  generated: text("generated").$defaultFn(() => sql`'made-by-' || 'sql'`),
});

describe("insertWhere with defaults computed in JavaScript", () => {
  it("fills a column not given from its $defaultFn (or its $onUpdate), as a plain insert does", async () => {
    await env.DB.exec(
      "CREATE TABLE IF NOT EXISTS insert_where_computed (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, token TEXT NOT NULL, stamped TEXT, generated TEXT)",
    );
    const db = getDb(env.DB);
    await db.batch([
      insertWhere(db, computed, { name: "conditional" }, sql`1 = 1`),
      db.insert(computed).values({ name: "plain" }),
      insertWhere(db, computed, { name: "given", token: "mine", stamped: "mine too" }, sql`1 = 1`),
    ]);
    const rows = (
      await env.DB.prepare("SELECT name, token, stamped, generated FROM insert_where_computed ORDER BY id").all()
    ).results;
    const made = { token: "made-by-default-fn", stamped: "made-by-on-update", generated: "made-by-sql" };
    expect(rows).toEqual([
      { name: "conditional", ...made },
      { name: "plain", ...made },
      { name: "given", token: "mine", stamped: "mine too", generated: "made-by-sql" },
    ]);
  });
});
