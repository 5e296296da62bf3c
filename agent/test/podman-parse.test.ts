import { describe, expect, it } from "vitest";
import { firstInspected, parsePs } from "../drivers/podman.ts";

describe("parsePs: what `ps --format json` says, from podman or docker", () => {
  it("reads podman's array: names, labels, state, exit code, image id", () => {
    const out = JSON.stringify([
      {
        Id: "abc",
        Names: ["hm-web"],
        Labels: { "io.harbormaster.agent": "web" },
        State: "exited",
        ExitCode: 137,
        Status: "Exited (137) 2 seconds ago",
        ImageID: "f00",
      },
    ]);
    expect(parsePs(out)).toEqual([
      {
        id: "abc",
        name: "hm-web",
        labels: { "io.harbormaster.agent": "web" },
        state: "exited",
        exitCode: 137,
        status: "Exited (137) 2 seconds ago",
        imageId: "f00",
        image: undefined,
      },
    ]);
  });

  it("reads docker's object per line, whose labels are one string and exit code is in the status", () => {
    const lines = [
      {
        ID: "d1",
        Names: "hm-web",
        Labels: "io.harbormaster.agent=web,io.harbormaster.image=a=b",
        State: "exited",
        Status: "Exited (3) 1 minute ago",
      },
      {
        ID: "d2",
        Names: "hm-db",
        Labels: "io.harbormaster.agent=db",
        State: "running",
        Status: "Up 2 minutes (unhealthy)",
      },
    ];
    expect(parsePs(lines.map((l) => JSON.stringify(l)).join("\n"))).toEqual([
      {
        id: "d1",
        name: "hm-web",
        labels: { "io.harbormaster.agent": "web", "io.harbormaster.image": "a=b" },
        state: "exited",
        exitCode: 3,
        status: "Exited (3) 1 minute ago",
        imageId: undefined,
        image: undefined,
      },
      {
        id: "d2",
        name: "hm-db",
        labels: { "io.harbormaster.agent": "db" },
        state: "running",
        exitCode: 0,
        status: "Up 2 minutes (unhealthy)",
        imageId: undefined,
        image: undefined,
      },
    ]);
  });

  it("reads no containers from an empty answer", () => {
    expect(parsePs("")).toEqual([]);
    expect(parsePs("[]\n")).toEqual([]);
  });
});

describe("an engine that answers what is not its JSON", () => {
  // A wrapper printing a warning on stdout, a truncated answer, a build that prints null.
  it("fails the listing with what it said, never a parser's or a null's error", () => {
    for (const out of [
      "WARN[0000] cgroupv2 is not set up",
      '[{"Id":"abc","Names":',
      "null",
      "[null]",
      "[1,2]",
      '{"Id":1}\nnot json',
    ])
      expect(() => parsePs(out), out).toThrow(/^the engine's ps did not answer its JSON: "/);
    expect(() => parsePs("x".repeat(5000))).toThrow(/x{200}"…$/);
  });

  it("fails an inspect the same way, and reads the first object of one that is", () => {
    for (const out of ["", "garbage", "[]", "[null]", "{}"])
      expect(() => firstInspected(out, "image inspect"), out).toThrow(
        /^the engine's image inspect did not answer its JSON/,
      );
    expect(firstInspected('[{"Id":"sha256:1"}]', "image inspect")).toEqual({ Id: "sha256:1" });
  });
});
