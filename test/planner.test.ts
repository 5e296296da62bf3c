import { describe, expect, it } from "vitest";
import { plan, planDiffers, type PlanInputs } from "../src/planner/plan";

const channels = {
  base: { image: "base:2", version: "2" },
  fw: { image: "fw:5", version: "5" },
  s3: { image: "s3:1", version: "1" },
  logs: { image: "logs:3", version: "3" },
};
const profiles = {
  compute: [{ name: "base" }, { name: "fw", when: "firewall" }, { name: "s3", when: "!object_storage" }],
  edge: [{ name: "base" }, { name: "logs" }, { name: "ghost" }],
};
const inputs = (over: Partial<PlanInputs>): PlanInputs => ({
  roles: ["compute"],
  profiles,
  capabilities: {},
  channels,
  current: [],
  ...over,
});
const names = (p: ReturnType<typeof plan>) => p.agents.map((a) => `${a.name}=${a.image}/${a.source}`);

describe("planner: roles × capabilities × channels (+ current images) → agents", () => {
  it.each<[string, Partial<PlanInputs>, string[], Partial<ReturnType<typeof plan>>?]>([
    ["no roles, nothing to run", { roles: [] }, []],
    [
      "an unconditioned agent always runs; a missing capability is not true",
      { capabilities: {} },
      ["base=base:2/channel", "s3=s3:1/channel"],
    ],
    [
      "`when` holds only when the capability is true",
      { capabilities: { firewall: true } },
      ["base=base:2/channel", "fw=fw:5/channel", "s3=s3:1/channel"],
    ],
    [
      "a false capability is not true",
      { capabilities: { firewall: false } },
      ["base=base:2/channel", "s3=s3:1/channel"],
    ],
    [
      "`!cap` drops the agent when the capability is true",
      { capabilities: { object_storage: true } },
      ["base=base:2/channel"],
    ],
    [
      "an agent the server already runs keeps its image, whatever the channel says",
      { current: [{ name: "base", image: "base:1", version: "1" }] },
      ["base=base:1/current", "s3=s3:1/channel"],
    ],
    [
      "an agent no role wants any more leaves",
      { roles: [], current: [{ name: "base", image: "base:1", version: "1" }] },
      [],
    ],
    [
      "roles combine; an agent wanted by two roles runs once",
      { roles: ["compute", "edge"] },
      ["base=base:2/channel", "logs=logs:3/channel", "s3=s3:1/channel"],
      { unplannable: ["ghost"] },
    ],
    [
      "a role with no profile contributes nothing and is named",
      { roles: ["compute", "db"] },
      ["base=base:2/channel", "s3=s3:1/channel"],
      { unknown_roles: ["db"] },
    ],
  ])("%s", (_name, over, expected, extra) => {
    const p = plan(inputs(over));
    expect(names(p)).toEqual(expected);
    if (extra) expect(p).toMatchObject(extra);
  });

  it("says whether a plan differs from the current agents (name, image, version)", () => {
    const current = [{ name: "base", image: "base:2", version: "2" }];
    expect(
      planDiffers(plan(inputs({ roles: ["edge"], profiles: { edge: [{ name: "base" }] }, current })), current),
    ).toBe(false);
    expect(planDiffers(plan(inputs({ current })), current)).toBe(true);
    expect(planDiffers(plan(inputs({ roles: [], current })), current)).toBe(true);
  });
});
