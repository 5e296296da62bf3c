import { catalogOf, catalogSpread } from "../domain/images";
import type { DesiredState } from "../model/server/record";
import type { AgentSpec, DesiredConfigInput } from "../model/server/schemas";

export type DesiredOutcome =
  | { kind: "accepted"; next: DesiredState }
  | { kind: "unchanged"; current: DesiredState }
  | { kind: "generation_conflict"; current: DesiredState }
  | { kind: "stale_generation"; current: DesiredState };

/**
 * An agent keeps its instance id from one generation to the next, so "the same agent, updated"
 * stays distinguishable from "a new installation" (docs/design.md §3).
 */
function withInstanceIds(input: DesiredConfigInput, current: DesiredState, newId: () => string): AgentSpec[] {
  const known = new Map(current.agents.map((a) => [a.name, a.instance_id]));
  return input.agents.map((a) => ({
    name: a.name,
    image: a.image,
    version: a.version,
    instance_id: a.instance_id ?? known.get(a.name) ?? newId(),
    ...catalogSpread(catalogOf(a)),
  }));
}

function sameContent(a: Pick<DesiredState, "agents" | "lifecycle">, b: Pick<DesiredState, "agents" | "lifecycle">) {
  if (a.lifecycle !== b.lifecycle || a.agents.length !== b.agents.length) return false;
  const byName = new Map(b.agents.map((x) => [x.name, x]));
  return a.agents.every((x) => {
    const y = byName.get(x.name);
    return (
      y &&
      y.image === x.image &&
      y.version === x.version &&
      y.instance_id === x.instance_id &&
      y.image_id === x.image_id
    );
  });
}

/** docs/design.md §4 generation rules; pure so every rule is unit-testable. */
export function applyDesired(
  current: DesiredState,
  input: DesiredConfigInput,
  now: number,
  newId: () => string = () => crypto.randomUUID(),
): DesiredOutcome {
  if (input.generation < current.generation) return { kind: "stale_generation", current };
  if (input.generation === current.generation) {
    // Same generation: ids the caller omitted are the ones already issued.
    const agents = withInstanceIds(input, current, () => "\u0000unissued");
    return sameContent({ agents, lifecycle: input.lifecycle }, current)
      ? { kind: "unchanged", current }
      : { kind: "generation_conflict", current };
  }
  return {
    kind: "accepted",
    next: {
      generation: input.generation,
      agents: withInstanceIds(input, current, newId),
      lifecycle: input.lifecycle,
      updated_at: now,
    },
  };
}
