import { Validator } from "@cfworker/json-schema";
import { describe, expect, it } from "vitest";
import { fleetSpecJsonSchema } from "../src/specs/json-schema";
import { fleetWithIntent, getSpec, WINDOW } from "./specs-helpers";

describe("the fleet spec's JSON Schema", () => {
  it("is the committed schemas/fleet-spec.schema.json (`npm run schema:fleet-spec` refreshes it)", async () => {
    await expect(JSON.stringify(fleetSpecJsonSchema(), null, 2) + "\n").toMatchFileSnapshot(
      "../schemas/fleet-spec.schema.json",
    );
  });

  it("accepts an exported spec and refuses what the API refuses by shape", async () => {
    const validator = new Validator(fleetSpecJsonSchema() as never, "2020-12", false);
    const { fleet } = await fleetWithIntent();
    const { spec } = await getSpec(fleet);
    expect(validator.validate(spec).valid).toBe(true);
    expect(validator.validate({ ...spec, reboot_groups: { g: { slots: 0 } } }).valid).toBe(false);
    expect(
      validator.validate({ ...spec, reboot_groups: { g: { slots: 1, windows: [{ ...WINDOW, days: [] }] } } }).valid,
    ).toBe(false);
    expect(validator.validate({ ...spec, surprise: 1 }).valid).toBe(false);
    expect(validator.validate({ ...spec, access: { "group:ops": "admin", "email:a@b.example": "read" } }).valid).toBe(
      true,
    );
    expect(validator.validate({ ...spec, access: { "team:ops": "read" } }).valid).toBe(false);
    expect(validator.validate({ ...spec, access: { "group:ops": "root" } }).valid).toBe(false);
    expect(validator.validate({ ...spec, kind: "Fleet" }).valid).toBe(false);
  });
});
