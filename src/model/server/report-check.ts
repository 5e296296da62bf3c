/**
 * The name of the InventoryReport rules this code validates a host's report with. The Worker sends
 * it beside the report text it validated (src/host/service.ts); a ledger that validates with the
 * same rules (the same deployment, or one whose report schema did not change) takes that text with
 * JSON.parse alone rather than run the schema a second time on it (src/ledger/report.ts). A caller
 * of another version mid-deploy whose rules differ, or one that sends no name, has its text
 * validated in full, as does everything else that reaches a ledger (the channel's messages).
 *
 * The JSON Schema shows every rule but the refinements (the agents' names unique): REFINEMENTS
 * names those, and changes with them.
 */
import { z } from "@hono/zod-openapi";
import { InventoryReport } from "./schemas";

const REFINEMENTS = "agents[].name unique";

let check: string | undefined;

/** Computed once an isolate (the schema's JSON Schema, hashed: a few milliseconds, once). */
export function inventoryReportCheck(): string {
  check ??= fnv1a(REFINEMENTS + JSON.stringify(z.toJSONSchema(InventoryReport)));
  return check;
}

/** 32-bit FNV-1a, in base 36: names a text, no secret in it (both sides are this deployment's code). */
function fnv1a(text: string) {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h.toString(36);
}
