import { describe, expect, it } from "vitest";
import { consoleStatusOf } from "../src/console/statuses";

describe("a domain refusal's status on a console page", () => {
  it("is the API's own status for it, and 502 only for one a page has no title for", () => {
    expect(consoleStatusOf("unauthorized")).toBe(401);
    expect(consoleStatusOf("forbidden")).toBe(403);
    expect(consoleStatusOf("validation_failed")).toBe(400);
    expect(consoleStatusOf("identity_provider_unavailable")).toBe(503);
    expect(consoleStatusOf("unsupported_media_type")).toBe(502);
  });
});
