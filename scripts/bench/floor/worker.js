// Three requests that set the floor Harbormaster's host operations are read against: an empty
// answer, one Durable Object RPC that reads a key, one that writes it (the synchronous KV API on
// SQLite, as the coordinator and the ledgers use). One object for every request, as one
// coordinator serves a whole fleet.
import { DurableObject } from "cloudflare:workers";

export class Floor extends DurableObject {
  read() {
    return this.ctx.storage.kv.get("n") ?? 0;
  }

  write() {
    const n = (this.ctx.storage.kv.get("n") ?? 0) + 1;
    this.ctx.storage.kv.put("n", n);
    return n;
  }
}

export default {
  async fetch(request, env) {
    const { pathname } = new URL(request.url);
    if (pathname === "/empty") return Response.json({ ok: true });
    const floor = env.FLOOR.get(env.FLOOR.idFromName("floor"));
    if (pathname === "/do/read") return Response.json({ n: await floor.read() });
    if (pathname === "/do/write") return Response.json({ n: await floor.write() });
    return new Response("not found", { status: 404 });
  },
};
