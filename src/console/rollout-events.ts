/**
 * A rollout's event log in sentences for its console page: what happened, to which server (by
 * hostname), and why — never raw JSON nor an id's fragment. Pure.
 */

type Details = Record<string, unknown> | null;

const str = (v: unknown) => (typeof v === "string" ? v : v === null || v === undefined ? null : String(v));
const pass = (d: Details) => (d?.pass === 1 ? " (rollback pass)" : "");
const because = (d: Details) => (str(d?.reason) ? `: ${str(d?.reason)}` : "");

const STATE_WORDS: Record<string, string> = {
  running: "started",
  paused: "paused",
  succeeded: "succeeded",
  failed: "failed",
  cancelled: "was cancelled",
  rolling_back: "began rolling back",
  rolled_back: "rolled back",
};

const TARGET_WORDS: Record<string, string> = {
  applying: "began applying the image",
  done: "realized the image",
  failed: "failed",
  timed_out: "timed out",
  skipped: "was skipped",
  queued: "was queued",
};

/** One event as a sentence; `hostname` is the target's, when the event is about one. */
export function describeRolloutEvent(kind: string, details: unknown, hostname: string | null): string {
  const d = (details && typeof details === "object" ? details : null) as Details;
  const who = hostname ?? "a server";
  if (kind === "rollout.running" && d && "targets" in d)
    return `Rollout started with ${d.targets} target(s)${Number(d.excluded) ? `, ${d.excluded} excluded` : ""}`;
  if (kind.startsWith("rollout.") && STATE_WORDS[kind.slice(8)])
    return `Rollout ${STATE_WORDS[kind.slice(8)]}${pass(d)}${because(d)}`;
  if (kind.startsWith("target.") && TARGET_WORDS[kind.slice(7)]) {
    const gen = d?.generation != null ? ` (generation ${d.generation})` : "";
    return `${who} ${TARGET_WORDS[kind.slice(7)]}${gen}${pass(d)}${because(d)}`;
  }
  switch (kind) {
    case "target.slot_refused":
      return `${who} was refused a reboot slot (${str(d?.kind) ?? "refused"}: ${str(d?.value) ?? ""}); it asks again shortly`;
    case "targets.skipped":
      return `${d?.count ?? "Some"} queued target(s) skipped${pass(d)}${because(d)}`;
    case "targets.via_channel":
      return `${d?.count ?? "Some"} server(s) that took the rollout's image from the fleet's channel join the rollback`;
    case "warning.slow_server":
      return `Slow server: ${str(d?.message) ?? who}`;
    case "step.started":
      return `Step ${d?.step} started: ${str(d?.title) ?? str(d?.kind) ?? ""}`;
    case "analysis.passed":
      return `Analysis of step ${d?.step} held through its bake time (${d?.samples} sample(s))`;
    case "analysis.failed": {
      const vs = d?.value != null ? ` — ${d.value}${d?.threshold != null ? ` against ${d.threshold}` : ""}` : "";
      return `Analysis of step ${d?.step} failed: ${str(d?.check) ?? "a check"}${vs} (${str(d?.detail) ?? ""})`;
    }
    case "rollout.auto_rollback":
      return `Rolling back by itself${because(d)}`;
  }
  return `${kind}${hostname ? ` (${hostname})` : ""}`;
}
