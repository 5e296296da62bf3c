// The runtime's inspector (DevTools protocol), for the benchmarks that take a V8 CPU profile of
// the worker: ./profile-report.ts, ./ledger-wake.ts and ./scenarios/rollout.ts.
import WebSocket from "ws";

export interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
  positionTicks?: { line: number; ticks: number }[];
}

/** A CPU profile as `Profiler.stop` answers it. */
export interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** One DevTools session on the worker's target of the runtime's inspector (else its first). */
export async function inspectorSession(port: number) {
  const targets = (await (await fetch(`http://127.0.0.1:${port}/json/list`)).json()) as {
    title: string;
    webSocketDebuggerUrl: string;
  }[];
  const target = targets.find((t) => t.title.includes("harbormaster")) ?? targets[0];
  if (!target) throw new Error("the runtime's inspector lists no target");
  const ws = new WebSocket(target.webSocketDebuggerUrl);
  await new Promise((r, j) => (ws.once("open", r), ws.once("error", j)));
  let id = 0;
  const pending = new Map<number, (v: unknown) => void>();
  ws.on("message", (data) => {
    const msg = JSON.parse(String(data)) as { id?: number; result?: unknown };
    if (msg.id !== undefined) pending.get(msg.id)?.(msg.result);
  });
  const send = (method: string, params: object = {}) =>
    new Promise<any>((r) => {
      pending.set(++id, r);
      ws.send(JSON.stringify({ id, method, params }));
    });
  return { send, close: () => ws.close(), title: target.title };
}
