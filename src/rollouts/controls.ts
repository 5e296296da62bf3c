/**
 * The operator's controls over a rollout's core, as a pure function: what each action makes of
 * the rollout's state, or why it is refused. The object applies the outcome (bulk skips, the
 * rollback pass) in one storage turn.
 */
import { driving, finish, isTerminal, type Control, type Core, type Outcome } from "./machine";

export type ControlResult =
  ({ ok: true } & Outcome & { newPass?: boolean }) | { ok: false; code: "invalid_state"; message: string };

/**
 * Pause and cancel stop new targets (cancel turns queued ones skipped); resume continues a
 * paused rollout; rollback (any state but rolling_back and rolled_back) starts the rollback pass,
 * keeping the rollout's id. Targets in flight always finish.
 */
export function control(core: Core, action: Control, now: number): ControlResult {
  const refuse = (why: string): ControlResult => ({
    ok: false,
    code: "invalid_state",
    message: `cannot ${action} a rollout that is ${core.state}${why}`,
  });
  const v = core.version + 1;
  switch (action) {
    case "pause":
      if (!driving(core.state)) return refuse("");
      return {
        ok: true,
        core: { ...core, state: "paused", paused_from: core.state as Core["paused_from"], version: v },
        entered: "paused",
      };
    case "resume": {
      if (core.state !== "paused") return refuse("");
      const resumed: Core = { ...core, state: core.paused_from ?? "running", paused_from: null, version: v };
      const done = finish(resumed, now);
      return { ok: true, core: done.core, entered: done.entered ?? resumed.state };
    }
    case "cancel":
      if (isTerminal(core.state)) return refuse("");
      return {
        ok: true,
        core: { ...core, state: "cancelled", paused_from: null, ended_at: now, version: v },
        skipQueued: "cancelled",
        entered: "cancelled",
      };
    case "rollback":
      if (
        core.state === "rolling_back" ||
        core.state === "rolled_back" ||
        (core.state === "paused" && core.paused_from === "rolling_back")
      ) {
        return refuse(core.state === "paused" ? " (a paused rollback)" : "");
      }
      return {
        ok: true,
        newPass: true,
        skipQueued: "rolled_back",
        entered: "rolling_back",
        core: {
          ...core,
          state: "rolling_back",
          pass: core.pass + 1,
          paused_from: null,
          reason: null,
          ended_at: null,
          prev_applying: core.prev_applying + core.counts.applying,
          version: v,
        },
      };
  }
}
