import { SELF } from "cloudflare:test";
import { HostAgent, type AgentEvent, type AgentExit } from "../agent/agent";
import type { MemoryDriver } from "../agent/memory-driver";
import { BASE } from "./helpers";

export const workerFetch = (input: string | URL | Request, init?: RequestInit) => SELF.fetch(input as string, init);

/** Runs an agent against the worker until `until` sees the event it waits for. */
export function runAgent(
  token: string,
  driver: MemoryDriver,
  extra: Partial<ConstructorParameters<typeof HostAgent>[0]> = {},
) {
  const events: AgentEvent[] = [];
  const waiters: { pred: (e: AgentEvent) => boolean; resolve: (e: AgentEvent) => void }[] = [];
  const controller = new AbortController();
  const agent = new HostAgent({
    url: BASE,
    token,
    driver,
    bootId: "boot-a",
    waitS: 20,
    reportIntervalMs: 60_000,
    fetch: workerFetch,
    ...extra,
    onEvent: (e) => {
      events.push(e);
      // oxlint-disable-next-line unicorn/no-useless-spread -- a copy: the loop removes from waiters
      for (const w of [...waiters]) {
        if (w.pred(e)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(e);
        }
      }
    },
  });
  const exit: Promise<AgentExit> = agent.run(controller.signal);
  const until = (pred: (e: AgentEvent) => boolean, ms = 15_000) =>
    new Promise<AgentEvent>((resolve, reject) => {
      const hit = events.find(pred);
      if (hit) return resolve(hit);
      const timer = setTimeout(
        () => reject(new Error(`no such event within ${ms} ms: ${JSON.stringify(events.map((e) => e.type))}`)),
        ms,
      );
      waiters.push({ pred, resolve: (e) => (clearTimeout(timer), resolve(e)) });
    });
  return { events, until, exit, stop: () => controller.abort() };
}

export const reported = (generation: number, status?: string) => (e: AgentEvent) =>
  e.type === "reported" && e.generation === generation && (status === undefined || e.accepted.status === status);
