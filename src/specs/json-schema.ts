/**
 * The fleet spec as a JSON Schema (draft 2020-12), generated from the zod schema the API
 * validates with (zod 4's toJSONSchema), as editors read it: the input side (a weekday may be
 * written in full), published as schemas/fleet-spec.schema.json.
 */
import { z } from "@hono/zod-openapi";
import { FleetSpec, SPEC_API_VERSION } from "./schemas";

export function fleetSpecJsonSchema() {
  return {
    ...z.toJSONSchema(FleetSpec, { io: "input", unrepresentable: "any", target: "draft-2020-12" }),
    title: `Harbormaster fleet spec (${SPEC_API_VERSION})`,
  };
}
