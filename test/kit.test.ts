import { env, runInDurableObject } from "cloudflare:test";
import { eq } from "drizzle-orm";
import { describe, expect, it, vi } from "vitest";
import {
  AUDIT_ROWS_PER_INSERT,
  auditEvent,
  auditInsertManyOnce,
  auditInsertOnce,
  type AuditEvent,
} from "../src/db/audit";
import { getDb } from "../src/db/client";
import { auditLog } from "../src/db/schema";
import {
  backoffMs,
  CallTimeout,
  NotYet,
  Outbox,
  OUTBOX_MAX_BACKOFF_MS,
  OUTBOX_SAFETY_MS,
  OUTBOX_TIMER,
} from "../src/objects/kit/outbox";
import { Pool } from "../src/objects/kit/pool";
import { Scheduler } from "../src/objects/kit/scheduler";
import { LedgerStore } from "../src/ledger/store";

const tick = (ms: number) => new Promise<void>((res) => setTimeout(res, ms));
/** Whether `p` settles within `ms`: a flush held up by something it should not wait for does not. */
const within = (p: Promise<unknown>, ms: number) =>
  Promise.race([p.then(() => "settled" as const), tick(ms).then(() => "pending" as const)]);
/** Waits until `ok()` holds, at most `ms`. */
async function until(ok: () => boolean, ms = 2_000) {
  for (const end = Date.now() + ms; !ok() && Date.now() < end;) await tick(5);
}
/** A receiver that answers only once the test opens its gate. */
function gate() {
  let open!: () => void;
  const shut = new Promise<void>((res) => (open = res));
  return { shut, open };
}

/** A scratch Durable Object's storage (a ledger no server was registered in). */
const scratch = <T>(fn: (storage: DurableObjectStorage) => Promise<T> | T) =>
  runInDurableObject(env.LEDGER.get(env.LEDGER.idFromName(crypto.randomUUID())), (_i, state) => fn(state.storage));

describe("scheduler", () => {
  /** Statements this scheduler sent to its table, counted on the storage it was given. */
  const timerStatements = (storage: DurableObjectStorage) => {
    const exec = storage.sql.exec.bind(storage.sql);
    let n = 0;
    storage.sql.exec = ((query: string, ...b: SqlStorageValue[]) => {
      if (query.includes("_timers")) n++;
      return exec(query, ...b);
    }) as typeof storage.sql.exec;
    return () => n;
  };

  it("sends no statement for an ask that would move nothing: a timer it set no later than the time asked, once committed", async () => {
    await scratch(async (storage) => {
      const store = new LedgerStore(storage);
      const s = new Scheduler(storage, (fn) => store.onCommit(fn));
      const count = timerStatements(storage);
      const now = Date.now();
      store.transaction(() => s.schedule("outbox", now + 10_000, null, { noLaterThan: true }));
      const first = count();
      // An outbox's burst of enqueues, each asking for its own safety time, later than the first.
      for (let i = 1; i <= 5; i++)
        store.transaction(() => s.schedule("outbox", now + 10_000 + i, null, { noLaterThan: true }));
      expect(count()).toBe(first);
      expect(s.dueAt("outbox")).toBe(now + 10_000);
      // Sooner, or with another payload, or exactly at a time: sent.
      s.schedule("outbox", now + 5_000, null, { noLaterThan: true });
      expect(s.dueAt("outbox")).toBe(now + 5_000);
      s.schedule("outbox", now + 6_000, { other: true }, { noLaterThan: true });
      expect(s.timer("outbox")).toEqual({ dueAt: now + 5_000, payload: { other: true } });
      s.schedule("outbox", now + 7_000);
      expect(s.dueAt("outbox")).toBe(now + 7_000);
    });
  });

  it("learns nothing from a rolled-back turn, nor from an ask a cancel undid before the commit", async () => {
    await scratch(async (storage) => {
      const store = new LedgerStore(storage);
      const s = new Scheduler(storage, (fn) => store.onCommit(fn));
      const now = Date.now();
      expect(() =>
        store.transaction(() => {
          s.schedule("outbox", now + 1_000, null, { noLaterThan: true });
          throw new Error("the turn fails after the ask");
        }),
      ).toThrow("the turn fails");
      expect(s.dueAt("outbox")).toBeNull();
      // Rolled back with its turn: the next ask is sent, whatever time it asks for.
      s.schedule("outbox", now + 9_000, null, { noLaterThan: true });
      expect(s.dueAt("outbox")).toBe(now + 9_000);
      // An ask, then a cancel in the same committed turn: the row is gone, and so is the bound.
      store.transaction(() => {
        s.schedule("outbox", now + 2_000, null, { noLaterThan: true });
        s.cancel("outbox");
      });
      s.schedule("outbox", now + 8_000, null, { noLaterThan: true });
      expect(s.dueAt("outbox")).toBe(now + 8_000);
      // A timer that fired is deleted by the scheduler: asked again later, it is stored again.
      s.schedule("quiet", now - 5);
      await s.fire({ quiet: () => {} }, now);
      expect(s.dueAt("quiet")).toBeNull();
      s.schedule("quiet", now + 3_000, null, { noLaterThan: true });
      expect(s.dueAt("quiet")).toBe(now + 3_000);
    });
  });

  it("sends a 'no later than' ask that follows, in the same turn, a plain ask which moved the timer later", async () => {
    await scratch(async (storage) => {
      const store = new LedgerStore(storage);
      const s = new Scheduler(storage, (fn) => store.onCommit(fn));
      const now = Date.now();
      s.schedule("outbox", now + 1_000, null, { noLaterThan: true });
      store.transaction(() => {
        // The row goes later (a flush's re-arm), not yet committed; the bound learnt before no
        // longer holds, and the ask after it must reach the row.
        s.schedule("outbox", now + 60_000);
        s.schedule("outbox", now + 2_000, null, { noLaterThan: true });
      });
      expect(s.dueAt("outbox")).toBe(now + 2_000);
      // Learnt on commit: the bound is the ask's time, not the plain ask's.
      s.schedule("outbox", now + 3_000, null, { noLaterThan: true });
      expect(s.dueAt("outbox")).toBe(now + 2_000);
    });
  });

  it("learns a timer's bound in a turn that also moved or cancelled another timer", async () => {
    await scratch(async (storage) => {
      const store = new LedgerStore(storage);
      const s = new Scheduler(storage, (fn) => store.onCommit(fn));
      const count = timerStatements(storage);
      const now = Date.now();
      store.transaction(() => {
        s.schedule("outbox", now + 10_000, null, { noLaterThan: true });
        // Another timer's plain ask and cancel say nothing about the outbox's row.
        s.schedule("quiet", now + 30_000);
        s.cancel("left");
      });
      const sent = count();
      s.schedule("outbox", now + 10_001, null, { noLaterThan: true });
      expect(count()).toBe(sent);
      expect(s.dueAt("outbox")).toBe(now + 10_000);
    });
  });

  it("forgets what a failed handler's own ask taught once its timer is put off for the retry", async () => {
    await scratch(async (storage) => {
      const store = new LedgerStore(storage);
      const s = new Scheduler(storage, (fn) => store.onCommit(fn));
      const now = Date.now();
      s.schedule("outbox", now - 5);
      const failing = () => {
        // An enqueue during the delivery, then the delivery fails: the row goes to the retry time.
        s.schedule("outbox", now + 1_000, null, { noLaterThan: true });
        throw new Error("delivery failed");
      };
      const error = vi.spyOn(console, "error").mockImplementation(() => {});
      try {
        await s.fire({ outbox: failing }, now);
      } finally {
        error.mockRestore();
      }
      expect(s.dueAt("outbox")!).toBeGreaterThan(now + 2_000);
      s.schedule("outbox", now + 2_000, null, { noLaterThan: true });
      expect(s.dueAt("outbox")).toBe(now + 2_000);
    });
  });

  it("keeps a timer its own handler sets again to the very time that fired (the queue's look at a deadline still due)", async () => {
    await scratch(async (storage) => {
      const s = new Scheduler(storage);
      const due = Date.now() - 5;
      s.schedule("queue", due);
      let runs = 0;
      // The handler's look finds the same moment still the earliest that needs one (its clock has
      // not moved since the alarm fired), and sets the timer there again.
      await s.fire({ queue: () => void (runs++, s.schedule("queue", due)) }, due);
      expect(runs).toBe(1);
      expect(s.dueAt("queue")).toBe(due);
      // Armed to fire again (a time already past is set as now).
      expect(await storage.getAlarm()).not.toBeNull();
      // A handler that does not set it again still has it removed once it ran.
      await s.fire({ queue: () => void runs++ }, due);
      expect(runs).toBe(2);
      expect(s.dueAt("queue")).toBeNull();
    });
  });

  it("moves a timer its own handler sets again no later than a later time to that time, not leaving it due at once", async () => {
    await scratch(async (storage) => {
      const s = new Scheduler(storage);
      const due = Date.now() - 5;
      const later = Date.now() + 60_000;
      s.schedule("pump", due);
      let runs = 0;
      // A rollout's slot retry: the handler finds targets still waiting and asks for the next
      // retry "no later than" its time. The fired time is spent: left at it, the alarm would fire
      // again at once, and again, until that retry's time came.
      await s.fire({ pump: () => void (runs++, s.schedule("pump", later, null, { noLaterThan: true })) }, due + 5);
      expect(runs).toBe(1);
      expect(s.dueAt("pump")).toBe(later);
      expect(await storage.getAlarm()).toBe(later);
    });
  });

  it("keeps the alarm at the earliest timer: arming a later one never postpones an earlier one", async () => {
    await scratch(async (storage) => {
      const s = new Scheduler(storage);
      const now = Date.now();
      s.schedule("release", now + 1_000);
      await s.arm();
      expect(await storage.getAlarm()).toBe(now + 1_000);
      s.schedule("retry", now + 60_000);
      await s.arm();
      expect(await storage.getAlarm()).toBe(now + 1_000);
      s.schedule("release", now + 30_000, null, { noLaterThan: true });
      expect(s.dueAt("release")).toBe(now + 1_000);
      s.schedule("sooner", now + 500);
      await s.arm();
      expect(await storage.getAlarm()).toBe(now + 500);
    });
  });

  it("trim moves an alarm earlier than every timer back to the earliest, and removes it when none is left", async () => {
    await scratch(async (storage) => {
      const s = new Scheduler(storage);
      const now = Date.now();
      s.schedule("watch", now + 600_000);
      s.schedule("safety", now + 10_000);
      await s.arm();
      expect(await storage.getAlarm()).toBe(now + 10_000);
      s.cancel("safety");
      // arm leaves an early alarm alone (a busy object's alarm is not moved back and forth)…
      await s.arm();
      expect(await storage.getAlarm()).toBe(now + 10_000);
      // …trim, asked for, takes it back to the next timer, and leaves one that is not early.
      await s.trim();
      expect(await storage.getAlarm()).toBe(now + 600_000);
      await s.trim();
      expect(await storage.getAlarm()).toBe(now + 600_000);
      s.cancel("watch");
      await s.trim();
      expect(await storage.getAlarm()).toBeNull();
      // Arming again after a trim still sets the alarm for a new timer.
      s.schedule("later", now + 30_000);
      await s.arm();
      expect(await storage.getAlarm()).toBe(now + 30_000);
    });
  });

  it("holdAlarm keeps the alarm for timers set before it until trim, which then sets it to the earliest exactly", async () => {
    await scratch(async (storage) => {
      const s = new Scheduler(storage);
      const now = Date.now();
      s.schedule("watch", now + 600_000);
      s.schedule("rows", now + 60_000);
      await s.arm();
      expect(await storage.getAlarm()).toBe(now + 60_000);
      s.holdAlarm(now + 60_000);
      // Held: a timer due sooner is stored, but the alarm stays (no setAlarm row)…
      s.schedule("safety", now + 10_000);
      await s.arm();
      await s.arm();
      expect(await storage.getAlarm()).toBe(now + 60_000);
      // …and after a crash here the stored alarm still comes by the hold's end and fires it.
      const restarted = new Scheduler(storage);
      const fired: string[] = [];
      await restarted.fire({ safety: (_p, name) => void fired.push(name) }, now + 60_000);
      expect(fired).toEqual(["safety"]);
      // The hold ends with trim: a timer still due sooner than the alarm gets it…
      s.schedule("safety", now + 10_000);
      s.schedule("retry", now + 2_000);
      await s.trim();
      expect(await storage.getAlarm()).toBe(now + 2_000);
      // …and arm brings the alarm forward again for a timer due sooner.
      s.schedule("sooner", now + 1_000);
      await s.arm();
      expect(await storage.getAlarm()).toBe(now + 1_000);
    });
  });

  it("holdAlarm keeps no alarm later than the hold's end", async () => {
    await scratch(async (storage) => {
      const s = new Scheduler(storage);
      const now = Date.now();
      s.schedule("watch", now + 600_000);
      await s.arm();
      s.holdAlarm(now + 60_000);
      s.schedule("safety", now + 10_000);
      await s.arm();
      expect(await storage.getAlarm()).toBe(now + 10_000);
    });
  });

  it("writes a storage row only when a timer moves: one for a new timer, none for one set where it already is or later under noLaterThan", async () => {
    await scratch(async (storage) => {
      // Counted as the cost meter counts them (src/local/storage-meter.ts): each statement's cursor.
      let cursors: SqlStorageCursor<Record<string, SqlStorageValue>>[] = [];
      const exec = storage.sql.exec.bind(storage.sql);
      storage.sql.exec = ((query: string, ...bindings: unknown[]) => {
        const cursor = exec(query, ...bindings);
        cursors.push(cursor);
        return cursor;
      }) as typeof storage.sql.exec;
      const s = new Scheduler(storage);
      const now = Date.now();
      s.schedule("other", now + 60_000); // the table made (a schema write) before counting
      const rows = (fn: () => void) => {
        cursors = [];
        fn();
        return cursors.reduce((n, c) => (c.toArray(), n + c.rowsWritten), 0);
      };
      expect(rows(() => s.schedule("outbox", now + 10_000, null, { noLaterThan: true }))).toBe(1);
      expect(rows(() => s.schedule("outbox", now + 20_000, null, { noLaterThan: true }))).toBe(0);
      expect(rows(() => s.schedule("outbox", now + 10_000))).toBe(0);
      expect(rows(() => s.schedule("outbox", now + 5_000, null, { noLaterThan: true }))).toBe(1);
      expect(s.dueAt("outbox")).toBe(now + 5_000);
      expect(rows(() => s.schedule("outbox", now + 8_000))).toBe(1);
      expect(rows(() => s.schedule("outbox", now + 8_000, { moved: true }))).toBe(1);
      expect(s.dueAt("outbox")).toBe(now + 8_000);
    });
  });

  it("arms without reading a timer row while every timer set since is at or after the alarm, and moves it for one set earlier", async () => {
    await scratch(async (storage) => {
      let cursors: SqlStorageCursor<Record<string, SqlStorageValue>>[] = [];
      const exec = storage.sql.exec.bind(storage.sql);
      storage.sql.exec = ((query: string, ...bindings: unknown[]) => {
        const cursor = exec(query, ...bindings);
        cursors.push(cursor);
        return cursor;
      }) as typeof storage.sql.exec;
      const s = new Scheduler(storage);
      const now = Date.now();
      for (let i = 0; i < 20; i++) s.schedule(`reservation:${i}`, now + 120_000 + i);
      s.schedule("outbox", now + 1_000);
      await s.arm();
      expect(await storage.getAlarm()).toBe(now + 1_000);
      // The rows arming reads, after the change `fn` makes.
      const read = async (fn: () => void) => {
        fn();
        cursors = [];
        await s.arm();
        return cursors.reduce((n, c) => (c.toArray(), n + c.rowsRead), 0);
      };
      // A busy path sets its timers later than the alarm, request after request: nothing to read.
      expect(await read(() => s.schedule("outbox", now + 2_000, null, { noLaterThan: true }))).toBe(0);
      expect(await read(() => s.schedule("queue", now + 60_000))).toBe(0);
      expect(await read(() => s.cancel("queue"))).toBe(0);
      expect(await storage.getAlarm()).toBe(now + 1_000);
      // One set earlier than the alarm is looked for, and the alarm follows it.
      expect(await read(() => s.schedule("sooner", now + 500))).toBeGreaterThan(0);
      expect(await storage.getAlarm()).toBe(now + 500);
    });
  });

  it("sets the alarm again once the one it set is long past unfired (the runtime gave it up)", async () => {
    await scratch(async (storage) => {
      const s = new Scheduler(storage);
      const t0 = Date.now();
      s.schedule("first", t0 + 1_000);
      await s.arm();
      expect(await storage.getAlarm()).toBe(t0 + 1_000);
      // The runtime dropped the alarm (its retries spent) without the handler ever running.
      await storage.deleteAlarm();
      s.now = () => t0 + 1_000 + 31_000;
      s.schedule("later", t0 + 120_000);
      await s.arm();
      expect(await storage.getAlarm()).toBe(t0 + 1_000);
    });
  });

  it("runs due timers by name or prefix, keeps a timer whose handler threw, and re-arms for the rest", async () => {
    await scratch(async (storage) => {
      const s = new Scheduler(storage);
      const now = Date.now();
      const ran: string[] = [];
      s.schedule("a", now - 10, { n: 1 });
      s.schedule("res:x", now - 5);
      s.schedule("boom", now - 1);
      s.schedule("later", now + 60_000);
      await s.fire(
        {
          a: (p) => void ran.push(`a:${(p as { n: number }).n}`),
          res: (_p, name) => void ran.push(name),
          boom: () => {
            throw new Error("boom");
          },
        },
        now,
      );
      expect(ran).toEqual(["a:1", "res:x"]);
      expect(s.dueAt("a")).toBeNull();
      expect(s.dueAt("boom")).toBeGreaterThan(now);
      expect(s.dueAt("later")).toBe(now + 60_000);
      expect(await storage.getAlarm()).toBe(s.dueAt("boom"));
    });
  });
});

describe("outbox", () => {
  it("keeps the newest payload of a keyed effect even when it is replaced during a delivery", async () => {
    await scratch(async (storage) => {
      const s = new Scheduler(storage);
      const delivered: number[] = [];
      let box: Outbox<"call">;
      box = new Outbox<"call">(
        storage,
        s,
        {
          call: {
            target: "call",
            deliver: async (p: { v: number }) => {
              delivered.push(p.v);
              // A newer state change lands while this delivery is under way.
              if (p.v === 1) box.enqueue("call", { v: 2 }, { key: "k" });
            },
          },
        },
        () => getDb(env.DB),
      );
      box.enqueue("call", { v: 1 }, { key: "k" });
      await box.flush();
      expect(box.pending()).toBe(1);
      await box.flush();
      expect(delivered).toEqual([1, 2]);
      expect(box.pending()).toBe(0);
    });
  });

  it("delivers an offered effect by the next flush without storing it or setting an alarm, leaves it to a stored one under its key, and drops it when D1 refuses", async () => {
    await scratch(async (storage) => {
      const s = new Scheduler(storage);
      let statements = 0;
      let delivered = 0;
      let fail = false;
      const db = () => getDb(env.DB);
      const box = new Outbox<"row">(
        storage,
        s,
        {
          row: {
            target: "d1",
            statements: () => {
              statements++;
              if (fail) throw new Error("D1 refused");
              return [db().select().from(auditLog).limit(1)];
            },
            delivered: () => void delivered++,
          },
        },
        db,
      );
      box.offer("row", "k");
      expect(box.pending()).toBe(0);
      expect(s.dueAt(OUTBOX_TIMER)).toBeNull();
      await box.flush();
      expect([statements, delivered]).toEqual([1, 1]);
      await box.flush();
      expect(statements).toBe(1);
      // A stored effect under the key pending: the offer rides on it (delivered once, by it).
      box.enqueue("row", {}, { key: "k" });
      box.offer("row", "k");
      await box.flush();
      expect([statements, delivered]).toEqual([2, 2]);
      // The stored effect's timer is left to fire once (see the outbox's rearm); an offer moves it not.
      const left = s.dueAt(OUTBOX_TIMER);
      fail = true;
      box.offer("row", "k");
      await box.flush();
      expect([statements, delivered, box.pending()]).toEqual([3, 2, 0]);
      expect(s.dueAt(OUTBOX_TIMER)).toBe(left);
    });
  });

  it("writes one storage row to store an effect, two with a key, one to remove it, and no timer row for each of a burst", async () => {
    await scratch(async (storage) => {
      const s = new Scheduler(storage);
      const box = new Outbox<"call">(storage, s, { call: { target: "call", deliver: async () => {} } }, () =>
        getDb(env.DB),
      );
      // Counted as the cost meter counts them (src/local/storage-meter.ts): each statement's cursor.
      let cursors: SqlStorageCursor<Record<string, SqlStorageValue>>[] = [];
      const exec = storage.sql.exec.bind(storage.sql);
      storage.sql.exec = ((query: string, ...bindings: unknown[]) => {
        const cursor = exec(query, ...bindings);
        cursors.push(cursor);
        return cursor;
      }) as typeof storage.sql.exec;
      const rows = async (fn: () => unknown) => {
        cursors = [];
        await fn();
        return cursors.reduce((n, c) => (c.toArray(), n + c.rowsWritten), 0);
      };
      box.enqueue("call", {}); // the tables made (schema writes) before counting
      await box.flush();
      // The timer the first effect set is still there, no later than a new effect's safety time.
      expect(await rows(() => box.enqueue("call", { n: 1 }))).toBe(1);
      expect(await rows(() => box.enqueue("call", { n: 2 }, { key: "k" }))).toBe(2);
      expect(await rows(() => box.enqueue("call", { n: 3 }, { key: "k" }))).toBe(1);
      // Delivered: each row deleted (one written each), the timer neither moved nor deleted.
      expect(await rows(() => box.flush())).toBe(2);
      expect(box.pending()).toBe(0);
      expect(await rows(() => box.enqueue("call", { n: 4 }))).toBe(1);
    });
  });

  it("keeps working on the table an older release made (AUTOINCREMENT, every key in its index)", async () => {
    await scratch(async (storage) => {
      storage.sql.exec(`CREATE TABLE _outbox (
        id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, dedup_key TEXT UNIQUE, payload TEXT NOT NULL,
        seq INTEGER NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 0, next_at INTEGER NOT NULL,
        created_at INTEGER NOT NULL, last_error TEXT)`);
      const s = new Scheduler(storage);
      const delivered: number[] = [];
      const box = new Outbox<"call">(
        storage,
        s,
        { call: { target: "call", deliver: async (p: { v: number }) => void delivered.push(p.v) } },
        () => getDb(env.DB),
      );
      box.enqueue("call", { v: 1 }, { key: "k" });
      box.enqueue("call", { v: 2 }, { key: "k" });
      box.enqueue("call", { v: 3 });
      expect(box.pending()).toBe(2);
      await box.flush();
      expect(delivered).toEqual([2, 3]);
      expect(box.pending()).toBe(0);
      // Still the older table: nothing was made anew.
      const ddl = storage.sql.exec<{ sql: string }>("SELECT sql FROM sqlite_master WHERE name = '_outbox'").one().sql;
      expect(ddl).toContain("AUTOINCREMENT");
    });
  });

  it("never removes a new effect that took the id of one discarded while it was being delivered", async () => {
    await scratch(async (storage) => {
      const s = new Scheduler(storage);
      const delivered: string[] = [];
      let oldId = 0;
      let newId = 0;
      let box: Outbox<"call">;
      box = new Outbox<"call">(
        storage,
        s,
        {
          call: {
            target: "call",
            deliver: async (p: { n: string }) => {
              delivered.push(p.n);
              if (p.n !== "old") return;
              // Dropped meanwhile (a wiped fleet's notices), and a new one stored: the table is
              // empty again, so SQLite gives the new row the old one's id.
              const id = storage.sql.exec<{ id: number }>("SELECT id FROM _outbox").one().id;
              box.discard("call");
              box.enqueue("call", { n: "new" });
              newId = storage.sql.exec<{ id: number }>("SELECT id FROM _outbox").one().id;
              oldId = id;
            },
          },
        },
        () => getDb(env.DB),
      );
      box.enqueue("call", { n: "old" });
      await box.flush();
      expect(newId).toBe(oldId);
      expect(box.pending()).toBe(1);
      await box.flush();
      expect(delivered).toEqual(["old", "new"]);
      expect(box.pending()).toBe(0);
    });
  });

  it("never removes a new effect that took a discarded one's id when the old delivery answers after a round read the new one", async () => {
    await scratch(async (storage) => {
      const old = gate();
      const fresh = gate();
      const calls: string[] = [];
      const box = new Outbox<"call">(
        storage,
        new Scheduler(storage),
        {
          call: {
            target: "call",
            timeoutMs: 60_000,
            deliver: async (p: { n: string }) => {
              calls.push(p.n);
              await (p.n === "old" ? old.shut : fresh.shut);
            },
          },
        },
        () => getDb(env.DB),
        2,
      );
      box.enqueue("call", { n: "old" });
      const first = box.flush();
      await until(() => calls.length === 1);
      const id = storage.sql.exec<{ id: number }>("SELECT id FROM _outbox").one().id;
      box.discard("call");
      box.enqueue("call", { n: "new" });
      expect(storage.sql.exec<{ id: number }>("SELECT id FROM _outbox").one().id).toBe(id);
      // A round reads the new row (same id, same seq 0) and calls its receiver.
      const second = box.flush();
      await until(() => calls.length === 2);
      old.open();
      await first;
      // The old delivery's answer belongs to a row that is gone: the new one stays until its own.
      expect(box.pending()).toBe(1);
      fresh.open();
      await second;
      expect([calls, box.pending()]).toEqual([["old", "new"], 0]);
    });
  });

  it("delivers an effect stored after the outbox drained even if the object dies before its flush, however far off the timer was left", async () => {
    await scratch(async (storage) => {
      const delivered: string[] = [];
      const effects = {
        call: { target: "call" as const, deliver: async (p: { n: string }) => void delivered.push(p.n) },
      };
      const s = new Scheduler(storage);
      const box = new Outbox<"call">(storage, s, effects, () => getDb(env.DB));
      box.enqueue("call", { n: "first" });
      await box.flush();
      // The drained outbox leaves its timer; say a backoff had left it an hour off.
      s.schedule(OUTBOX_TIMER, Date.now() + 3_600_000);
      await s.arm();
      const stored = Date.now();
      box.enqueue("call", { n: "second" });
      await s.arm();
      // kill -9 here: the second effect is committed, its flush never runs. The object comes back
      // with nothing in memory, and its alarm fires within the safety time.
      expect(s.dueAt(OUTBOX_TIMER)!).toBeLessThanOrEqual(Date.now() + OUTBOX_SAFETY_MS);
      expect((await storage.getAlarm())!).toBeLessThanOrEqual(Date.now() + OUTBOX_SAFETY_MS);
      const s2 = new Scheduler(storage);
      const box2 = new Outbox<"call">(storage, s2, effects, () => getDb(env.DB));
      await s2.fire({ [OUTBOX_TIMER]: () => box2.flush() }, stored + OUTBOX_SAFETY_MS + 50);
      expect(delivered).toEqual(["first", "second"]);
      expect(box2.pending()).toBe(0);
    });
  });

  it("keeps the timer no later than an effect a delivered hook stored, while the round that delivers it is under way", async () => {
    await scratch(async (storage) => {
      const s = new Scheduler(storage);
      const seen: { timer: number | null; due: number }[] = [];
      let box: Outbox<"first" | "next">;
      box = new Outbox<"first" | "next">(
        storage,
        s,
        {
          first: { target: "call", deliver: async () => {}, delivered: () => box.enqueue("next", {}) },
          next: {
            target: "call",
            // What a kill -9 now would leave: the round that stored this effect over (it set no
            // timer, the round after it does), this one not.
            deliver: async () => {
              const due = storage.sql.exec<{ next_at: number }>("SELECT next_at FROM _outbox").one().next_at;
              seen.push({ timer: s.dueAt(OUTBOX_TIMER), due });
            },
          },
        },
        () => getDb(env.DB),
      );
      // Deferred an hour: the timer is that far off when the first round begins.
      box.enqueue("first", {}, { deferMs: 3_600_000 });
      await box.flush();
      expect(seen).toHaveLength(1);
      expect(seen[0].timer).not.toBeNull();
      expect(seen[0].timer!).toBeLessThanOrEqual(seen[0].due);
      expect(box.pending()).toBe(0);
    });
  });

  it("holds an effect that answered NotYet until its time, whatever flushes come before", async () => {
    await scratch(async (storage) => {
      const s = new Scheduler(storage);
      let calls = 0;
      const at = Date.now() + 60_000;
      const box = new Outbox<"call">(
        storage,
        s,
        {
          call: {
            target: "call",
            deliver: async () => {
              calls++;
              throw new NotYet(at);
            },
          },
        },
        () => getDb(env.DB),
      );
      box.enqueue("call", {});
      await box.flush();
      await box.flush();
      await box.flush();
      expect(calls).toBe(1);
      expect(box.pending()).toBe(1);
      expect(s.dueAt(OUTBOX_TIMER)).toBe(at);
    });
  });

  it("never re-times a new effect that took a discarded one's id when the old delivery answers NotYet", async () => {
    await scratch(async (storage) => {
      const calls: string[] = [];
      let box: Outbox<"call">;
      box = new Outbox<"call">(
        storage,
        new Scheduler(storage),
        {
          call: {
            target: "call",
            deliver: async (p: { n: string }) => {
              calls.push(p.n);
              if (p.n !== "old") return;
              box.discard("call");
              box.enqueue("call", { n: "new" });
              // The old row's rate limit, an hour off: it says nothing of the new row.
              throw new NotYet(Date.now() + 3_600_000);
            },
          },
        },
        () => getDb(env.DB),
      );
      box.enqueue("call", { n: "old" });
      await box.flush();
      const row = storage.sql
        .exec<{ attempts: number; next_at: number }>("SELECT attempts, next_at FROM _outbox")
        .one();
      expect(row.attempts).toBe(0);
      expect(row.next_at).toBeLessThanOrEqual(Date.now() + OUTBOX_SAFETY_MS);
      await box.flush();
      expect([calls, box.pending()]).toEqual([["old", "new"], 0]);
    });
  });

  it("parks effects of a kind this code does not know, logged once, and delivers the known ones behind them without spinning", async () => {
    await scratch(async (storage) => {
      // Stored by a newer release that knew the kind "gone"; then its deploy was rolled back.
      const newer = new Outbox<"gone" | "known">(
        storage,
        new Scheduler(storage),
        {
          gone: { target: "call", deliver: async () => {} },
          known: { target: "call", deliver: async () => {} },
        },
        () => getDb(env.DB),
      );
      for (let n = 0; n < 250; n++) newer.enqueue("gone", { n });
      for (const n of [1, 2, 3]) newer.enqueue("known", { n });
      let reads = 0;
      const exec = storage.sql.exec.bind(storage.sql);
      storage.sql.exec = ((query: string, ...bindings: unknown[]) => {
        if (query.includes("FROM _outbox WHERE id > ? AND attempts")) reads++;
        return exec(query, ...bindings);
      }) as typeof storage.sql.exec;
      const errors = vi.spyOn(console, "error").mockImplementation(() => {});
      try {
        const s = new Scheduler(storage);
        const delivered: number[] = [];
        const box = new Outbox<"known">(
          storage,
          s,
          { known: { target: "call", deliver: async (p: { n: number }) => void delivered.push(p.n) } },
          () => getDb(env.DB),
        );
        const before = Date.now();
        expect(await within(box.flush(), 5_000)).toBe("settled");
        expect(delivered).toEqual([1, 2, 3]);
        expect(box.pending()).toBe(250);
        expect(reads).toBeLessThanOrEqual(2);
        // Kept for a release that knows them, looked at again no sooner than an hour on.
        expect(s.dueAt(OUTBOX_TIMER)!).toBeGreaterThanOrEqual(before + 3_600_000);
        await box.flush();
        expect(errors.mock.calls.filter((c) => String(c[0]).includes("unknown kind"))).toHaveLength(1);
        expect(box.pending()).toBe(250);
      } finally {
        errors.mockRestore();
      }
    });
  });

  it("makes a keyed effect enqueued anew due at once, keeping the failed attempts of the one it replaces", async () => {
    await scratch(async (storage) => {
      const s = new Scheduler(storage);
      const box = new Outbox<"call">(
        storage,
        s,
        {
          call: {
            target: "call",
            deliver: async () => {
              throw new Error("down");
            },
          },
        },
        () => getDb(env.DB),
      );
      const attempts = () =>
        storage.sql.exec<{ attempts: number; next_at: number }>("SELECT attempts, next_at FROM _outbox").one();
      box.enqueue("call", { v: 1 }, { key: "k" });
      await box.flush();
      await storage.sql.exec("UPDATE _outbox SET next_at = ?", Date.now() - 1);
      await box.flush();
      expect(attempts().attempts).toBe(2);
      const before = Date.now();
      box.enqueue("call", { v: 2 }, { key: "k" });
      expect(attempts().attempts).toBe(2);
      expect(attempts().next_at).toBeLessThanOrEqual(Date.now());
      await box.flush();
      expect(attempts().attempts).toBe(3);
      expect(attempts().next_at).toBeGreaterThanOrEqual(before + backoffMs(3, 0));
    });
  });

  it("backs off a failing effect without holding back the first attempt of a new one", async () => {
    await scratch(async (storage) => {
      const s = new Scheduler(storage);
      let up = false;
      const delivered: string[] = [];
      const box = new Outbox<"call">(
        storage,
        s,
        {
          call: {
            target: "call",
            deliver: async (p: { n: string }) => {
              if (!up) throw new Error("down");
              delivered.push(p.n);
            },
          },
        },
        () => getDb(env.DB),
      );
      const before = Date.now();
      box.enqueue("call", { n: "first" });
      await box.flush();
      expect(delivered).toEqual([]);
      // Retried no sooner than the backoff, and the timer follows it.
      const timer = s.dueAt(OUTBOX_TIMER)!;
      expect(timer).toBeGreaterThanOrEqual(before + 500);
      expect(timer).toBeLessThanOrEqual(Date.now() + 1_000);
      up = true;
      box.enqueue("call", { n: "second" });
      await box.flush();
      expect(delivered).toEqual(["second"]);
      expect(box.pending()).toBe(1);
      // Still within the first one's backoff: the alarm waits for it; it goes once due.
      expect(s.dueAt(OUTBOX_TIMER)).toBe(timer);
      storage.sql.exec("UPDATE _outbox SET next_at = ?", Date.now() - 1);
      await box.flush();
      expect(delivered).toEqual(["second", "first"]);
      expect(box.pending()).toBe(0);
    });
  });

  it("arms the alarm for an effect before its first delivery, so a crash right after the commit delays it by OUTBOX_SAFETY_MS at most", async () => {
    await scratch(async (storage) => {
      const s = new Scheduler(storage);
      const box = new Outbox<"call">(storage, s, { call: { target: "call", deliver: async () => {} } }, () =>
        getDb(env.DB),
      );
      const now = Date.now();
      box.enqueue("call", {});
      await s.arm();
      const alarm = (await storage.getAlarm())!;
      expect(alarm).toBeGreaterThanOrEqual(now + OUTBOX_SAFETY_MS - 50);
      expect(alarm).toBeLessThanOrEqual(Date.now() + OUTBOX_SAFETY_MS);
    });
  });

  it("holds deferred effects for one batch: delivered with the next flush or by the alarm within deferMs", async () => {
    await scratch(async (storage) => {
      const s = new Scheduler(storage);
      const batches: string[][] = [];
      const box = new Outbox<"d1">(
        storage,
        s,
        {
          d1: {
            target: "d1",
            statements: () => [],
            delivered: (p: { n: string }) => void (batches.at(-1) ?? batches[batches.push([]) - 1]).push(p.n),
          },
        },
        () => getDb(env.DB),
      );
      const now = Date.now();
      for (const n of ["a", "b", "c"]) box.enqueue("d1", { n }, { deferMs: 1_000 });
      expect(s.dueAt(OUTBOX_TIMER)).toBeLessThanOrEqual(now + 1_000 + 50);
      expect(box.pending()).toBe(3);
      batches.push([]);
      await box.flush();
      expect(batches).toEqual([["a", "b", "c"]]);
      expect(box.pending()).toBe(0);
    });
  });

  it("runs a call effect's delivered hook once the receiver took it, and delivers what the hook enqueued in the same flush", async () => {
    await scratch(async (storage) => {
      const s = new Scheduler(storage);
      const log: string[] = [];
      let up = false;
      let box: Outbox<"first" | "next">;
      box = new Outbox<"first" | "next">(
        storage,
        s,
        {
          first: {
            target: "call",
            deliver: async () => {
              if (!up) throw new Error("down");
              log.push("first");
            },
            delivered: () => {
              log.push("first delivered");
              box.enqueue("next", {});
            },
          },
          next: { target: "d1", statements: () => [], delivered: () => void log.push("next delivered") },
        },
        () => getDb(env.DB),
      );
      box.enqueue("first", {});
      await box.flush();
      // Refused: no hook, nothing next.
      expect(log).toEqual([]);
      up = true;
      storage.sql.exec("UPDATE _outbox SET next_at = ?", Date.now() - 1);
      await box.flush();
      expect(log).toEqual(["first", "first delivered", "next delivered"]);
      expect(box.pending()).toBe(0);
    });
  });

  it("joins the flushes asked for while one is under way into one more: each reads the outbox once, and all they were asked for is delivered", async () => {
    await scratch(async (storage) => {
      let reads = 0;
      const exec = storage.sql.exec.bind(storage.sql);
      storage.sql.exec = ((query: string, ...bindings: unknown[]) => {
        if (query.includes("FROM _outbox WHERE id > ? AND attempts")) reads++;
        return exec(query, ...bindings);
      }) as typeof storage.sql.exec;
      let open!: () => void;
      const gate = new Promise<void>((res) => (open = res));
      const delivered: string[] = [];
      const box = new Outbox<"slow" | "row">(
        storage,
        new Scheduler(storage),
        {
          slow: { target: "call", deliver: () => gate.then(() => void delivered.push("slow")) },
          row: {
            target: "d1",
            statements: () => [],
            delivered: (p) => void delivered.push(`row ${(p as { n: number }).n}`),
          },
        },
        () => getDb(env.DB),
      );
      box.enqueue("slow", {});
      const first = box.flush();
      // The first flush waits on its receiver; three more are asked for meanwhile, each after an effect.
      await new Promise((res) => setTimeout(res, 20));
      const more: Promise<void>[] = [];
      for (const n of [1, 2, 3]) {
        box.enqueue("row", { n });
        more.push(box.flush());
      }
      expect(reads).toBe(1);
      // They are one flush, which does not wait for the first one's receiver.
      await Promise.all(more);
      expect(reads).toBe(2);
      expect(delivered).toEqual(["row 1", "row 2", "row 3"]);
      open();
      await first;
      expect(delivered).toEqual(["row 1", "row 2", "row 3", "slow"]);
      expect(box.pending()).toBe(0);
      // Once that one has run, the next flush reads again.
      await box.flush();
      expect(reads).toBe(3);
    });
  });

  it("gives each call slot the next call as soon as its own is done: a hung receiver holds back none of the other calls of its flush", async () => {
    await scratch(async (storage) => {
      const hung = gate();
      const delivered: string[] = [];
      const box = new Outbox<"hung" | "fast">(
        storage,
        new Scheduler(storage),
        {
          hung: { target: "call", timeoutMs: 60_000, deliver: () => hung.shut.then(() => void delivered.push("hung")) },
          fast: {
            target: "call",
            deliver: async (p: { n: number }) => {
              await tick(2);
              delivered.push(`fast ${p.n}`);
            },
          },
        },
        () => getDb(env.DB),
        2,
      );
      box.enqueue("hung", {});
      for (const n of [1, 2, 3, 4]) box.enqueue("fast", { n });
      const flushed = box.flush();
      await until(() => delivered.length === 4);
      expect(delivered).toEqual(["fast 1", "fast 2", "fast 3", "fast 4"]);
      expect(box.pending()).toBe(1);
      expect(await within(flushed, 20)).toBe("pending");
      hung.open();
      await flushed;
      expect(delivered.at(-1)).toBe("hung");
      expect(box.pending()).toBe(0);
    });
  });

  it("delivers a later flush's D1 effect while an earlier flush's call still waits on its receiver, without calling that receiver again", async () => {
    await scratch(async (storage) => {
      const hung = gate();
      let calls = 0;
      const delivered: string[] = [];
      const box = new Outbox<"hung" | "row">(
        storage,
        new Scheduler(storage),
        {
          hung: {
            target: "call",
            timeoutMs: 60_000,
            deliver: () => {
              calls++;
              return hung.shut.then(() => void delivered.push("hung"));
            },
          },
          row: { target: "d1", statements: () => [], delivered: () => void delivered.push("row") },
        },
        () => getDb(env.DB),
      );
      box.enqueue("hung", {});
      const first = box.flush();
      await tick(20);
      box.enqueue("row", {});
      expect(await within(box.flush(), 2_000)).toBe("settled");
      expect(delivered).toEqual(["row"]);
      expect(calls).toBe(1);
      expect(box.pending()).toBe(1);
      hung.open();
      await first;
      expect(delivered).toEqual(["row", "hung"]);
      expect([calls, box.pending()]).toEqual([1, 0]);
    });
  });

  it("counts a call not answered by its deadline as a failed attempt backed off as any other, and its late answer removes nothing and runs no hook", async () => {
    await scratch(async (storage) => {
      const s = new Scheduler(storage);
      const late = gate();
      let calls = 0;
      let hooks = 0;
      let signal: AbortSignal | undefined;
      const box = new Outbox<"call">(
        storage,
        s,
        {
          call: {
            target: "call",
            timeoutMs: 50,
            deliver: async (_p, sig) => {
              if (++calls > 1) return;
              signal = sig;
              await late.shut;
            },
            delivered: () => void hooks++,
          },
        },
        () => getDb(env.DB),
      );
      const before = Date.now();
      box.enqueue("call", {});
      expect(await within(box.flush(), 2_000)).toBe("settled");
      const row = () =>
        storage.sql
          .exec<{ attempts: number; next_at: number; last_error: string }>(
            "SELECT attempts, next_at, last_error FROM _outbox",
          )
          .one();
      expect(row().attempts).toBe(1);
      expect(row().last_error).toContain("no answer within 50 ms");
      expect(row().next_at).toBeGreaterThanOrEqual(before + backoffMs(1, 0));
      expect(s.dueAt(OUTBOX_TIMER)).toBe(row().next_at);
      expect(signal?.reason).toBeInstanceOf(CallTimeout);
      // Not retried before its backoff, whatever flushes come.
      await box.flush();
      expect(calls).toBe(1);
      // The receiver answers at last: the row stays for its retry, no hook runs.
      late.open();
      await tick(20);
      expect([box.pending(), hooks]).toEqual([1, 0]);
      storage.sql.exec("UPDATE _outbox SET next_at = ?", Date.now() - 1);
      await box.flush();
      expect([calls, hooks, box.pending()]).toEqual([2, 1, 0]);
    });
  });

  it("holds only a hung receiver's own calls behind it: the other receivers' calls go at once, one at a time each, in order", async () => {
    await scratch(async (storage) => {
      const hung = gate();
      const log: string[] = [];
      const running = new Map<string, number>();
      let most = 0;
      const deliver = async (p: { to: string; n: number }) => {
        const now = (running.get(p.to) ?? 0) + 1;
        running.set(p.to, now);
        most = Math.max(most, now);
        if (p.to === "hung") await hung.shut;
        else await tick(1);
        log.push(`${p.to} ${p.n}`);
        running.set(p.to, now - 1);
      };
      const box = new Outbox<"call">(
        storage,
        new Scheduler(storage),
        // The default deadline (30 s): a receiver that hangs holds its slot that long.
        { call: { target: "call", deliver, lane: (p: { to: string }) => p.to } },
        () => getDb(env.DB),
        4,
      );
      for (const n of [1, 2]) box.enqueue("call", { to: "hung", n });
      for (let n = 1; n <= 20; n++) box.enqueue("call", { to: n % 2 ? "b" : "c", n });
      const started = Date.now();
      const flushed = box.flush();
      await until(() => log.length === 20, 5_000);
      const took = Date.now() - started;
      // 20 calls to two other receivers behind a hung one: delivered in milliseconds, where one
      // slot for all had them wait out the hung call's deadline, 30 s.
      expect(took).toBeLessThan(2_000);
      expect(log.filter((l) => l.startsWith("b"))).toEqual([1, 3, 5, 7, 9, 11, 13, 15, 17, 19].map((n) => `b ${n}`));
      expect(log.filter((l) => l.startsWith("c"))).toEqual([2, 4, 6, 8, 10, 12, 14, 16, 18, 20].map((n) => `c ${n}`));
      expect(most).toBe(1);
      expect(box.pending()).toBe(2);
      hung.open();
      await flushed;
      expect(log.slice(20)).toEqual(["hung 1", "hung 2"]);
      expect(box.pending()).toBe(0);
    });
  });

  it("fails a call whose lane cannot be read like any failed attempt, and delivers the others", async () => {
    await scratch(async (storage) => {
      const got: number[] = [];
      const box = new Outbox<"call">(
        storage,
        new Scheduler(storage),
        {
          call: {
            target: "call",
            deliver: async (p: { n: number }) => {
              got.push(p.n);
            },
            lane: (p: { n: number }) => {
              if (p.n === 2) throw new Error("no lane for 2");
              return "x";
            },
          },
        },
        () => getDb(env.DB),
        4,
      );
      for (const n of [1, 2, 3]) box.enqueue("call", { n });
      await box.flush();
      expect(got).toEqual([1, 3]);
      const rows = storage.sql
        .exec<{ attempts: number; next_at: number; last_error: string }>(
          "SELECT attempts, next_at, last_error FROM _outbox",
        )
        .toArray();
      expect(rows).toHaveLength(1);
      expect(rows[0]!.attempts).toBe(1);
      expect(rows[0]!.last_error).toContain("no lane for 2");
      // Backed off, not due again at once: the alarm does not fire over and over for it.
      expect(rows[0]!.next_at).toBeGreaterThan(Date.now());
    });
  });

  it("keeps enqueue order at concurrency 1, across flushes too: one call at a time, each after the one before", async () => {
    await scratch(async (storage) => {
      const log: string[] = [];
      let running = 0;
      let most = 0;
      const box = new Outbox<"call">(
        storage,
        new Scheduler(storage),
        {
          call: {
            target: "call",
            deliver: async (p: { n: string; ms: number }) => {
              most = Math.max(most, ++running);
              await tick(p.ms);
              log.push(p.n);
              running--;
            },
          },
        },
        () => getDb(env.DB),
      );
      box.enqueue("call", { n: "a", ms: 30 });
      box.enqueue("call", { n: "b", ms: 1 });
      box.enqueue("call", { n: "c", ms: 10 });
      const first = box.flush();
      await tick(5);
      box.enqueue("call", { n: "d", ms: 1 });
      box.enqueue("call", { n: "e", ms: 1 });
      await Promise.all([first, box.flush()]);
      expect(log).toEqual(["a", "b", "c", "d", "e"]);
      expect(most).toBe(1);
    });
  });

  it("delivers a keyed effect's newer payload only once the older one's attempt settled, by the flush asked for it", async () => {
    await scratch(async (storage) => {
      const slow = gate();
      const log: number[] = [];
      let running = 0;
      let most = 0;
      const box = new Outbox<"call">(
        storage,
        new Scheduler(storage),
        {
          call: {
            target: "call",
            deliver: async (p: { v: number }) => {
              most = Math.max(most, ++running);
              if (p.v === 1) await slow.shut;
              log.push(p.v);
              running--;
            },
          },
        },
        () => getDb(env.DB),
        2,
      );
      box.enqueue("call", { v: 1 }, { key: "k" });
      const first = box.flush();
      await tick(20);
      box.enqueue("call", { v: 2 }, { key: "k" });
      const second = box.flush();
      expect(await within(second, 50)).toBe("pending");
      expect(log).toEqual([]);
      slow.open();
      await Promise.all([first, second]);
      expect(log).toEqual([1, 2]);
      expect([most, box.pending()]).toEqual([1, 0]);
    });
  });

  it("keeps a timer for a keyed effect's newer payload while its older attempt settles and the round owed for it waits its turn", async () => {
    await scratch(async (storage) => {
      const s = new Scheduler(storage);
      const slow = gate();
      const d1 = gate();
      const log: number[] = [];
      const box = new Outbox<"call" | "row">(
        storage,
        s,
        {
          call: {
            target: "call",
            deliver: async (p: { v: number }) => {
              if (p.v === 1) await slow.shut;
              log.push(p.v);
            },
          },
          row: {
            target: "d1",
            statements: async () => {
              await d1.shut;
              return [];
            },
          },
        },
        () => getDb(env.DB),
        2,
      );
      box.enqueue("call", { v: 1 }, { key: "k" });
      const first = box.flush();
      await tick(20);
      box.enqueue("call", { v: 2 }, { key: "k" });
      // Reads the newer payload and leaves it behind the older one's attempt.
      const second = box.flush();
      await tick(20);
      // A round that waits on D1 before it reads: the round owed for the newer payload queues behind it.
      box.offer("row", "r", {});
      const third = box.flush();
      await tick(20);
      slow.open();
      await tick(20);
      expect(log).toEqual([1]);
      // A caller takes back an idle timer meanwhile (a ledger's write after its flush).
      box.forgetIdleTimer();
      expect(box.pending()).toBe(1);
      // Were the object killed now, this timer is what delivers the newer payload.
      expect(s.dueAt(OUTBOX_TIMER)).not.toBeNull();
      d1.open();
      await Promise.all([first, second, third]);
      expect(log).toEqual([1, 2]);
      expect(box.pending()).toBe(0);
    });
  });

  it("delivers a keyed effect's newer payload by the flush asked for it when the older one's attempt failed, with no backoff of its own", async () => {
    await scratch(async (storage) => {
      const hung = gate();
      const log: number[] = [];
      const box = new Outbox<"call">(
        storage,
        new Scheduler(storage),
        {
          call: {
            target: "call",
            timeoutMs: 100,
            deliver: async (p: { v: number }) => {
              if (p.v === 1) await hung.shut;
              log.push(p.v);
            },
          },
        },
        () => getDb(env.DB),
      );
      box.enqueue("call", { v: 1 }, { key: "k" });
      const first = box.flush();
      await tick(20);
      // An operator's write replaces the payload and waits for its flush to deliver it.
      box.enqueue("call", { v: 2 }, { key: "k" });
      const second = box.flush();
      // The older payload's receiver never answers: its attempt fails at its deadline. That
      // failure is the older payload's: the newer one is still due at once, not after a backoff.
      expect(await within(Promise.all([first, second]), 2_000)).toBe("settled");
      expect(log).toEqual([2]);
      expect(box.pending()).toBe(0);
      hung.open();
    });
  });

  it("keeps the alarm set while a call waits, never in the past, and a new instance after a kill -9 delivers the effect", async () => {
    await scratch(async (storage) => {
      const s = new Scheduler(storage);
      const hung = gate();
      let calls = 0;
      const box = new Outbox<"call">(
        storage,
        s,
        {
          call: {
            target: "call",
            timeoutMs: 60_000,
            deliver: () => {
              calls++;
              return hung.shut;
            },
          },
        },
        () => getDb(env.DB),
      );
      box.enqueue("call", {});
      void box.flush();
      await tick(20);
      // The effect's time passes while its call waits: the alarm's flush leaves it to that call,
      // and sets the alarm a while on, not at once (it would fire again and again).
      storage.sql.exec("UPDATE _outbox SET next_at = ?", Date.now() - 1);
      s.schedule(OUTBOX_TIMER, Date.now() - 1);
      expect(await within(s.fire({ [OUTBOX_TIMER]: () => box.flush() }), 2_000)).toBe("settled");
      expect(calls).toBe(1);
      expect(s.dueAt(OUTBOX_TIMER)).toBeGreaterThanOrEqual(Date.now() + 500);
      // kill -9: the memory of the call under way is gone with the object; the row is not.
      let delivered = 0;
      const next = new Outbox<"call">(
        storage,
        new Scheduler(storage),
        { call: { target: "call", deliver: async () => void delivered++ } },
        () => getDb(env.DB),
      );
      await next.flush();
      expect([delivered, next.pending()]).toEqual([1, 0]);
      hung.open();
    });
  });

  it("keeps the alarm at a running call's deadline, not every second, while calls wait for a slot past their own", async () => {
    await scratch(async (storage) => {
      const s = new Scheduler(storage);
      const hung = gate();
      const box = new Outbox<"slow" | "quick">(
        storage,
        s,
        {
          slow: { target: "call", timeoutMs: 60_000, deliver: () => hung.shut },
          quick: { target: "call", timeoutMs: 50, deliver: async () => {} },
        },
        () => getDb(env.DB),
        1,
      );
      // Due in a moment, so that their time has truly passed by the alarm below.
      box.enqueue("slow", {}, { deferMs: 1 });
      box.enqueue("quick", {}, { deferMs: 1 });
      const flushed = box.flush();
      // The quick call waits for the one slot longer than its own deadline; it has not started.
      await tick(150);
      s.schedule(OUTBOX_TIMER, Date.now() - 1);
      expect(await within(s.fire({ [OUTBOX_TIMER]: () => box.flush() }), 2_000)).toBe("settled");
      // Nothing can end before the slow call's deadline: an alarm a second on would only fire
      // again and again (a billed alarm and a read of the outbox each) while the queue waits.
      expect(s.dueAt(OUTBOX_TIMER)).toBeGreaterThanOrEqual(Date.now() + 30_000);
      hung.open();
      await flushed;
      expect(box.pending()).toBe(0);
    });
  });

  it("sets the alarm for a running call past its deadline, so the call's own timeout fails it first and no alarm fires for it", async () => {
    await scratch(async (storage) => {
      const s = new Scheduler(storage);
      const hung = gate();
      const box = new Outbox<"slow">(
        storage,
        s,
        { slow: { target: "call", timeoutMs: 2_000, deliver: () => hung.shut } },
        () => getDb(env.DB),
        1,
      );
      const started = Date.now();
      box.enqueue("slow", {});
      const flushed = box.flush();
      await tick(50);
      storage.sql.exec("UPDATE _outbox SET next_at = ?", Date.now() - 1);
      s.schedule(OUTBOX_TIMER, Date.now() - 1);
      expect(await within(s.fire({ [OUTBOX_TIMER]: () => box.flush() }), 2_000)).toBe("settled");
      expect(s.dueAt(OUTBOX_TIMER)).toBeGreaterThanOrEqual(started + 2_000 + 1_000);
      hung.open();
      await flushed;
      expect(box.pending()).toBe(0);
    });
  });

  it("finds when the next effect is due reading few rows, with 500 stored and 32 calls under way", async () => {
    await scratch(async (storage) => {
      const s = new Scheduler(storage);
      const hung = gate();
      const box = new Outbox<"call" | "row">(
        storage,
        s,
        {
          call: { target: "call", timeoutMs: 60_000, deliver: () => hung.shut },
          row: { target: "d1", statements: () => [] },
        },
        () => getDb(env.DB),
        32,
      );
      for (let n = 0; n < 32; n++) box.enqueue("call", { n });
      const flushed = box.flush();
      await tick(20);
      for (let n = 0; n < 468; n++) box.enqueue("row", { n }, { deferMs: 60_000 });
      expect(box.pending()).toBe(500);
      // Counted as the cost meter counts them (src/local/storage-meter.ts): each statement's cursor.
      const cursors: SqlStorageCursor<Record<string, SqlStorageValue>>[] = [];
      const exec = storage.sql.exec.bind(storage.sql);
      storage.sql.exec = ((query: string, ...bindings: unknown[]) => {
        const cursor = exec(query, ...bindings);
        if (!query.includes("_timers")) cursors.push(cursor);
        return cursor;
      }) as typeof storage.sql.exec;
      box.forgetIdleTimer();
      storage.sql.exec = exec;
      const read = cursors.reduce((n, c) => (c.toArray(), n + c.rowsRead), 0);
      // Before, a scan of every row: 500 read.
      expect(read).toBeLessThanOrEqual(2);
      hung.open();
      await flushed;
      // And still right: once the calls settled, the timer follows the deferred rows' time.
      expect(s.dueAt(OUTBOX_TIMER)!).toBeLessThanOrEqual(Date.now() + 60_000);
      expect(s.dueAt(OUTBOX_TIMER)!).toBeGreaterThan(Date.now() + 50_000);
    });
  });

  it("starts a round reading only the rows it can start, not again those of 200 calls under way", async () => {
    await scratch(async (storage) => {
      const hung = gate();
      const called: number[] = [];
      const box = new Outbox<"call">(
        storage,
        new Scheduler(storage),
        {
          call: {
            target: "call",
            timeoutMs: 60_000,
            deliver: async (p: { n: number }) => {
              called.push(p.n);
              await hung.shut;
            },
          },
        },
        () => getDb(env.DB),
        100,
      );
      // 100 calls waiting on their receivers, 100 more waiting for a slot: all under way.
      for (let n = 0; n < 200; n++) box.enqueue("call", { n });
      const first = box.flush();
      await until(() => called.length === 100);
      box.enqueue("call", { n: 200 });
      // Counted as the cost meter counts them (src/local/storage-meter.ts): each statement's cursor.
      const cursors: SqlStorageCursor<Record<string, SqlStorageValue>>[] = [];
      const exec = storage.sql.exec.bind(storage.sql);
      storage.sql.exec = ((query: string, ...bindings: unknown[]) => {
        const cursor = exec(query, ...bindings);
        if (query.includes("FROM _outbox") && query.startsWith("SELECT")) cursors.push(cursor);
        return cursor;
      }) as typeof storage.sql.exec;
      const second = box.flush();
      await tick(20);
      storage.sql.exec = exec;
      const read = cursors.reduce((n, c) => (c.toArray(), n + c.rowsRead), 0);
      // Before, the round read every row under way again (LIMIT 200 + the calls under way): 201.
      expect(read).toBeLessThanOrEqual(3);
      hung.open();
      await Promise.all([first, second]);
      expect([called.length, new Set(called).size, box.pending()]).toEqual([201, 201, 0]);
    });
  });

  it("delivers an effect stored once the outbox drained, at an id behind the rounds' cursor, without a new instance", async () => {
    await scratch(async (storage) => {
      const delivered: string[] = [];
      const box = new Outbox<"call">(
        storage,
        new Scheduler(storage),
        { call: { target: "call", deliver: async (p: { n: string }) => void delivered.push(p.n) } },
        () => getDb(env.DB),
      );
      box.enqueue("call", { n: "a" });
      box.enqueue("call", { n: "b" });
      await box.flush();
      expect(box.pending()).toBe(0);
      // The table is empty: SQLite's next id would be 1, behind the rounds' cursor (2).
      box.enqueue("call", { n: "c" });
      await box.flush();
      box.enqueue("call", { n: "d" }, { key: "k" });
      await box.flush();
      expect([delivered, box.pending()]).toEqual([["a", "b", "c", "d"], 0]);
    });
  });

  it("delivers an effect stored at the id of the last row read, gone while an earlier call is still under way", async () => {
    await scratch(async (storage) => {
      const hung = gate();
      const delivered: string[] = [];
      const box = new Outbox<"call">(
        storage,
        new Scheduler(storage),
        {
          call: {
            target: "call",
            timeoutMs: 60_000,
            deliver: async (p: { n: string }) => {
              if (p.n === "a") await hung.shut;
              delivered.push(p.n);
            },
          },
        },
        () => getDb(env.DB),
        2,
      );
      box.enqueue("call", { n: "a" });
      box.enqueue("call", { n: "b" });
      const first = box.flush();
      await until(() => delivered.includes("b"));
      // Row 2 is gone, row 1 still under way: SQLite gives the new row id 2 again.
      box.enqueue("call", { n: "c" });
      expect(storage.sql.exec<{ id: number }>("SELECT MAX(id) AS id FROM _outbox").one().id).toBe(2);
      await box.flush();
      expect(delivered).toEqual(["b", "c"]);
      hung.open();
      await first;
      expect([delivered, box.pending()]).toEqual([["b", "c", "a"], 0]);
    });
  });

  it("removes a round's delivered D1 rows in one statement, keeping the row a newer payload replaced meanwhile", async () => {
    await scratch(async (storage) => {
      const delivered: string[] = [];
      let box: Outbox<"row">;
      box = new Outbox<"row">(
        storage,
        new Scheduler(storage),
        {
          row: {
            target: "d1",
            statements: (p) => {
              const { n } = p as { n: string };
              // Replaced while its round is under way: the newer payload must survive the removal.
              if (n === "b1") box.enqueue("row", { n: "b2" }, { key: "b" });
              return [];
            },
            delivered: (p) => void delivered.push((p as { n: string }).n),
          },
        },
        () => getDb(env.DB),
      );
      box.enqueue("row", { n: "a" });
      box.enqueue("row", { n: "b1" }, { key: "b" });
      box.enqueue("row", { n: "c" });
      const deletes: string[] = [];
      const exec = storage.sql.exec.bind(storage.sql);
      storage.sql.exec = ((query: string, ...bindings: unknown[]) => {
        if (query.startsWith("DELETE FROM _outbox")) deletes.push(query);
        return exec(query, ...bindings);
      }) as typeof storage.sql.exec;
      await box.flush();
      expect([delivered, deletes.length, box.pending()]).toEqual([["a", "b1", "c"], 1, 1]);
      await box.flush();
      storage.sql.exec = exec;
      expect([delivered, box.pending()]).toEqual([["a", "b1", "c", "b2"], 0]);
    });
  });

  it("caps and jitters the backoff", () => {
    expect(backoffMs(1, 0)).toBe(500);
    expect(backoffMs(1, 1)).toBe(1000);
    expect(backoffMs(4, 1)).toBe(8000);
    expect(backoffMs(40, 1)).toBe(OUTBOX_MAX_BACKOFF_MS);
    expect(backoffMs(40, 0)).toBe(OUTBOX_MAX_BACKOFF_MS / 2);
  });
});

describe("call pool", () => {
  it("runs at most its size at once, starts queued tasks in order as slots free, and frees the slot of a task that throws at once", async () => {
    const pool = new Pool(2);
    const started: number[] = [];
    let running = 0;
    let most = 0;
    const task = (n: number, ms: number) => async () => {
      started.push(n);
      most = Math.max(most, ++running);
      await tick(ms);
      running--;
      return n;
    };
    const thrower = () => {
      started.push(0);
      throw new Error("at once");
    };
    const results = [
      pool.run(task(1, 30)),
      pool.run(thrower as () => Promise<number>).catch(() => -1),
      pool.run(task(2, 1)),
      pool.run(task(3, 1)),
      pool.run(task(4, 1)),
    ];
    expect(await Promise.all(results)).toEqual([1, -1, 2, 3, 4]);
    expect(started).toEqual([1, 0, 2, 3, 4]);
    expect(most).toBe(2);
  });
});

describe("call pool lanes", () => {
  it("runs one task of a lane at a time in order, and lets other lanes pass a busy one", async () => {
    const pool = new Pool(2);
    const hung = gate();
    const log: string[] = [];
    const first = pool.run(() => hung.shut.then(() => void log.push("a1")), "a");
    const second = pool.run(async () => void log.push("a2"), "a");
    const others = [1, 2, 3].map((n) => pool.run(async () => void log.push(`b${n}`), "b"));
    await Promise.all(others);
    expect(log).toEqual(["b1", "b2", "b3"]);
    hung.open();
    await Promise.all([first, second]);
    expect(log).toEqual(["b1", "b2", "b3", "a1", "a2"]);
  });
});

describe("idempotent receipt of audit events", () => {
  it("inserts an outbox audit row once however often it is delivered", async () => {
    const db = getDb(env.DB);
    const event = auditEvent({ actor: "test", action: "test.redelivery", target: `test:${crypto.randomUUID()}` });
    await db.batch([auditInsertOnce(db, event)]);
    await db.batch([auditInsertOnce(db, event)]);
    expect(await db.select().from(auditLog).where(eq(auditLog.target, event.target))).toHaveLength(1);
  });
});

describe("audit rows delivered many to a statement", () => {
  it("sends a run of 40 audit events as 3 inserts within D1's bound parameters, each row inserted once however often delivered, other kinds in their place", async () => {
    await scratch(async (storage) => {
      const target = `test:${crypto.randomUUID()}`;
      const real = getDb(env.DB);
      const sent: number[] = [];
      // The batch as D1 gets it: its statements counted, then run.
      const db = () =>
        ({
          batch: (items: Parameters<typeof real.batch>[0]) => {
            sent.push(items.length);
            return real.batch(items);
          },
        }) as unknown as typeof real;
      const order: string[] = [];
      const box = new Outbox<"audit" | "other">(
        storage,
        new Scheduler(storage),
        {
          audit: {
            target: "d1",
            statements: (e: AuditEvent) => [auditInsertOnce(real, e)],
            many: (es: AuditEvent[]) => (order.push(`audit×${es.length}`), auditInsertManyOnce(real, es)),
          },
          other: { target: "d1", statements: () => (order.push("other"), []) },
        },
        db,
      );
      const events = Array.from({ length: 40 }, (_, i) => auditEvent({ actor: "test", action: `test.${i}`, target }));
      for (const e of events.slice(0, 20)) box.enqueue("audit", e, { deferMs: 1_000 });
      box.enqueue("other", {}, { deferMs: 1_000 });
      for (const e of events.slice(20)) box.enqueue("audit", e, { deferMs: 1_000 });
      await box.flush();
      expect(order).toEqual(["audit×20", "other", "audit×20"]);
      // 20 rows: an insert of 16 and one of 4, twice.
      expect(sent).toEqual([4]);
      // Counted on the SQL itself, not assumed: a column added to audit_log adds one a row, and
      // D1 refuses a statement of more than 100 (the local one does not).
      const params = auditInsertManyOnce(real, events).map((q) => q.toSQL().params.length);
      expect(params).toHaveLength(Math.ceil(events.length / AUDIT_ROWS_PER_INSERT));
      expect(Math.max(...params)).toBeLessThanOrEqual(100);
      // Delivered again (a crash before the outbox forgot them): nothing inserted twice.
      const [first, ...rest] = auditInsertManyOnce(real, events);
      await real.batch([first, ...rest]);
      const rows = await real.select().from(auditLog).where(eq(auditLog.target, target));
      expect(rows).toHaveLength(40);
      expect(new Set(rows.map((r) => r.action)).size).toBe(40);
    });
  });
});
