/**
 * Everything a host's report says except when it was said: two reports with the same content tell
 * the server the same. The ledger keys its stored report by it (src/ledger/store.ts) and the
 * reference agent compares its reports by it (agent/agent.ts), so the two agree by construction.
 */
export interface ReportContent {
  generation: number;
  boot_id: string;
  agents: unknown[];
  errors: unknown[];
  assignments: unknown;
}

export function contentKey(r: ReportContent) {
  return JSON.stringify([r.generation, r.boot_id, r.agents, r.errors, r.assignments]);
}
