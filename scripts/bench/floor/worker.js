// The requests that set the floor Harbormaster's host operations are read against: an empty
// answer, one Durable Object RPC that reads a key, one that writes it (the synchronous KV API on
// SQLite, as the coordinator and the ledgers use), and one that writes the request's body (a
// host's report, as bytes) as one value: one bare object write of the same request a report is,
// its body carried into the object and stored. One object for every request, as one coordinator
// serves a whole fleet; and, as a rollout target meets its ledger, the same write on an object of
// its own chosen by name (`/do/cold/<name>`), which the rollout scenario calls once each while the
// runtime has them asleep: the floor of waking an object.
import { DurableObject } from "cloudflare:workers";

/**
 * Instances of Floor this isolate has constructed (`/starts`): how many calls found their object
 * asleep and had the runtime start it. The fixture has no meter; the objects and the Worker share
 * one isolate, so a module counter sees every start.
 */
let starts = 0;

export class Floor extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    starts++;
  }

  read() {
    return this.ctx.storage.kv.get("n") ?? 0;
  }

  write() {
    const n = (this.ctx.storage.kv.get("n") ?? 0) + 1;
    this.ctx.storage.kv.put("n", n);
    return n;
  }

  /** The body stored as one value: one row written, nothing read (no cheaper write carries it). */
  writeBody(body) {
    this.ctx.storage.kv.put("body", body);
    return body.length;
  }
}

export default {
  async fetch(request, env) {
    const { pathname } = new URL(request.url);
    if (pathname === "/empty") return Response.json({ ok: true });
    if (pathname === "/starts") return Response.json({ starts });
    if (pathname.startsWith("/do/cold/")) {
      const name = decodeURIComponent(pathname.slice("/do/cold/".length));
      return Response.json({ n: await env.FLOOR.get(env.FLOOR.idFromName(name)).write() });
    }
    const floor = env.FLOOR.get(env.FLOOR.idFromName("floor"));
    if (pathname === "/do/read") return Response.json({ n: await floor.read() });
    if (pathname === "/do/write") return Response.json({ n: await floor.write() });
    if (pathname === "/do/body" && request.method === "POST")
      return Response.json({ bytes: await floor.writeBody(await request.text()) });
    return new Response("not found", { status: 404 });
  },
};
