/**
 * A fleet's deletion racing the writes that need the fleet: whichever lands second must see that
 * the other happened. Found from outside (npm start, DELETE /v1/fleets/{id} sent together with a
 * channel PUT, or a registration, on a fresh fleet): both answered 2xx in 4 rounds of 25, and the
 * channel outlived its fleet (inherited by the next fleet of that name), or the server stood in a
 * fleet that no longer existed. Here each race is made deterministic: the deletion lands inside
 * the write, after it read the fleet.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { getDb } from "../src/db/client";
import { DomainError } from "../src/domain/errors";
import { channelWrite } from "../src/intent/batch";
import { changeIntent, deleteFleet } from "../src/fleets/service";
import { registerServer as register } from "../src/servers/service";
import type { Env } from "../src/env";
import { call, createFleet, uniq } from "./helpers";
import { coordinator } from "./support/objects";

type Coordinator = ReturnType<Env["REBOOT"]["get"]>;

/** The Worker's env with each coordinator call of `method` running `before` first (the race's other side). */
function coordinatorRunning(method: "reserveRegistration" | "sealForDeletion", before: () => Promise<void>): Env {
  return {
    ...env,
    REBOOT: {
      idFromName: (name: string) => env.REBOOT.idFromName(name),
      get: (id: DurableObjectId) =>
        new Proxy(env.REBOOT.get(id), {
          get(target: Coordinator, prop) {
            if (prop !== method) return Reflect.get(target, prop);
            return async (...args: unknown[]) => {
              await before();
              return (target[method] as (...a: unknown[]) => Promise<unknown>)(...args);
            };
          },
        }),
    },
  } as unknown as Env;
}

describe("a fleet deleted while an intent write is being decided", () => {
  it("refuses the write as a missing fleet and leaves nothing of it behind, for a fleet of revision 0", async () => {
    const { id: fleet } = await createFleet();
    const db = getDb(env.DB);
    const write = changeIntent(db, fleet, async ({ rev }) => {
      expect(rev).toBe(0);
      // The deletion lands between the write's read and its batch.
      expect((await call("DELETE", `/v1/fleets/${fleet}`)).status).toBe(204);
      const channel = { image: "registry.example/fw:1", version: "1" };
      return { result: "written", statements: [...channelWrite(db, "test", fleet, "fw", channel, null, Date.now())] };
    });
    const refused = await write.then(
      () => null,
      (err: unknown) => err,
    );
    expect(refused).toBeInstanceOf(DomainError);
    expect((refused as DomainError).code).toBe("not_found");
    for (const table of ["agent_channels", "agent_channel_history", "fleet_intent"]) {
      const rows = await env.DB.prepare(`SELECT COUNT(*) AS n FROM ${table} WHERE fleet_id = ?`)
        .bind(fleet)
        .first<{ n: number }>();
      expect([table, rows!.n]).toEqual([table, 0]);
    }
    // A fleet of the same name starts with nothing of the deleted one.
    expect((await call("POST", "/v1/fleets", { body: { id: fleet } })).status).toBe(201);
    expect((await call("GET", `/v1/fleets/${fleet}/channels`)).json.items).toEqual([]);
  });
});

describe("a fleet deleted while a server is being registered in it", () => {
  it("refuses the deletion while a registration is in flight (409), keeping nobody out", async () => {
    const { id: fleet } = await createFleet();
    // A registration between its name's reservation and its ledger's commit: in no index yet.
    const reserved = await coordinator(fleet).reserveRegistration(
      `${uniq("h")}.example.com`,
      null,
      crypto.randomUUID(),
    );
    expect(reserved.ok).toBe(true);
    const refused = await call("DELETE", `/v1/fleets/${fleet}`);
    expect([refused.status, refused.json.error.code]).toEqual([409, "fleet_not_empty"]);
    expect(refused.json.error.message).toMatch(/being registered/);
    expect((await call("GET", `/v1/fleets/${fleet}`)).status).toBe(200);
    // The refused deletion keeps nobody out.
    expect(
      (await call("POST", "/v1/servers", { body: { fleet, hostname: `${uniq("h")}.example.com`, kind: "managed" } }))
        .status,
    ).toBe(201);
  });

  it("refuses a registration that read the fleet before its deletion landed, leaving no server behind", async () => {
    const { id: fleet } = await createFleet();
    // The deletion lands (and wipes the coordinator) just before the registration reserves its name.
    const racing = coordinatorRunning("reserveRegistration", async () => {
      expect((await call("DELETE", `/v1/fleets/${fleet}`)).status).toBe(204);
    });
    const input = { fleet, hostname: `${uniq("h")}.example.com`, kind: "managed", roles: [], reboot_group: "default" };
    const refused = await register(racing, "test", input as Parameters<typeof register>[2]).then(
      () => null,
      (err: unknown) => err,
    );
    expect((refused as DomainError)?.code).toBe("unknown_fleet");
    const rows = await env.DB.prepare("SELECT COUNT(*) AS n FROM servers WHERE fleet_id = ?")
      .bind(fleet)
      .first<{ n: number }>();
    expect(rows!.n).toBe(0);
    expect((await call("GET", `/v1/fleets/${fleet}`)).status).toBe(404);
  });

  it("keeps registrations out while a deletion is being committed, and lets them in if it is refused", async () => {
    const { id: fleet } = await createFleet();
    expect(await coordinator(fleet).sealForDeletion()).toEqual({ ok: true });
    const kept = await call("POST", "/v1/servers", {
      body: { fleet, hostname: `${uniq("h")}.example.com`, kind: "managed" },
    });
    expect([kept.status, kept.json.error.code]).toEqual([409, "fleet_removal_pending"]);
    await coordinator(fleet).unseal();
    expect(
      (await call("POST", "/v1/servers", { body: { fleet, hostname: `${uniq("h")}.example.com`, kind: "managed" } }))
        .status,
    ).toBe(201);
  });
});

describe("a server entering the index while a fleet's deletion is being decided", () => {
  it("refuses the deletion at its commit, keeping the fleet and the server, and unseals the coordinator", async () => {
    const { id: fleet } = await createFleet();
    const serverId = crypto.randomUUID();
    let landed = false;
    // The server's row lands after the deletion counted none (a ledger's projection delivered
    // late, its name's reservation already settled), just before the coordinator is sealed.
    const racing = coordinatorRunning("sealForDeletion", async () => {
      if (landed) return;
      landed = true;
      const now = Date.now();
      await env.DB.prepare(
        `INSERT INTO servers (id, fleet_id, hostname, kind, roles, reboot_group, state, status, desired_generation, stale_at, created_at, updated_at)
         VALUES (?1, ?2, ?3, 'managed', '[]', 'default', 'provisioning', 'unknown', 1, ?4, ?4, ?4)`,
      )
        .bind(serverId, fleet, `${uniq("h")}.example.com`, now)
        .run();
    });
    const refused = await deleteFleet(racing, "test", fleet).then(
      () => null,
      (err: unknown) => err,
    );
    expect((refused as DomainError)?.code).toBe("fleet_not_empty");
    expect((await call("GET", `/v1/fleets/${fleet}`)).status).toBe(200);
    const rows = await env.DB.prepare("SELECT COUNT(*) AS n FROM servers WHERE id = ? AND fleet_id = ?")
      .bind(serverId, fleet)
      .first<{ n: number }>();
    expect(rows!.n).toBe(1);
    // The refused deletion keeps no registration out.
    expect(
      (await call("POST", "/v1/servers", { body: { fleet, hostname: `${uniq("h")}.example.com`, kind: "managed" } }))
        .status,
    ).toBe(201);
  });
});
