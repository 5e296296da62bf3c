// The host report the ledger scenario sends, and the floor fixture's write of the same request
// carries (./floor: POST /do/body): one definition, so the two bodies are the same size.

export const AGENTS = [
  { name: "compute", image: "registry.example/compute:4.2.0", version: "4.2.0" },
  { name: "vm", image: "registry.example/vm:1.9.3", version: "1.9.3" },
  { name: "logs", image: "registry.example/logs:2.0.1", version: "2.0.1" },
];

/** `reconciled_at` as the agent stamps it (agent/agent.ts: `new Date(now).toISOString()`, 24 characters). */
const FIXED_AT = "2026-11-21T00:00:00.000Z";

export function hostReport(
  generation: number,
  state: "running" | "stopped" = "running",
  reconciledAt: string = FIXED_AT,
) {
  return {
    generation,
    reconciled_at: reconciledAt,
    boot_id: "boot-1",
    agents: AGENTS.map((a, i) => ({ ...a, instance_id: `i-${i}`, state: i === 0 ? state : ("running" as const) })),
    errors: [],
    assignments: { units: [], storage: [] },
  };
}

export const hostReportBody = (generation: number, state: "running" | "stopped" = "running") =>
  JSON.stringify(hostReport(generation, state));

/**
 * What a real host sends when nothing changed: the reference agent builds every report anew and
 * stamps it with the time its pass ended, so two unchanged reports are never the same text. Each
 * call answers the same content with the next millisecond's `reconciled_at` (a counter, so no two
 * are equal however fast they are asked for), the same size as `hostReportBody`: the floor's write
 * of a report's body stays a write of as many bytes.
 */
export function freshReportBodies(generation: number, state: "running" | "stopped" = "running") {
  const [head, tail] = hostReportBody(generation, state).split(FIXED_AT);
  let at = Date.parse("2026-11-27T00:00:00.000Z");
  return () => head + new Date(at++).toISOString() + tail;
}
