// The host report the ledger scenario sends, and the floor fixture's write of the same request
// carries (./floor: POST /do/body): one definition, so the two bodies are the same bytes.

export const AGENTS = [
  { name: "compute", image: "registry.example/compute:4.2.0", version: "4.2.0" },
  { name: "vm", image: "registry.example/vm:1.9.3", version: "1.9.3" },
  { name: "logs", image: "registry.example/logs:2.0.1", version: "2.0.1" },
];

export function hostReport(generation: number, state: "running" | "stopped" = "running") {
  return {
    generation,
    reconciled_at: "2026-11-21T00:00:00Z",
    boot_id: "boot-1",
    agents: AGENTS.map((a, i) => ({ ...a, instance_id: `i-${i}`, state: i === 0 ? state : ("running" as const) })),
    errors: [],
    assignments: { units: [], storage: [] },
  };
}

export const hostReportBody = (generation: number, state: "running" | "stopped" = "running") =>
  JSON.stringify(hostReport(generation, state));
