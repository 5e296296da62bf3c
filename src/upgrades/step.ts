import type { BatchItem } from "drizzle-orm/batch";
import type { Db } from "../db/client";
import type { Env } from "../env";

interface StepContext {
  db: Db;
  env: Env;
  /** The run's clock, so every row a step touches carries one timestamp. */
  now: number;
}

/** What one chunk commits, and where the next chunk starts (null: this was the last chunk). */
interface ChunkResult {
  statements: BatchItem<"sqlite">[];
  next: string | null;
}

/**
 * A point-to-point data upgrade from `version - 1` to `version`. `chunk` may read freely but
 * changes data only through the statements it returns: the runner commits them in one D1 batch
 * together with the cursor (or, on the last chunk, the version bump), so a step is never half
 * applied. Steps must be idempotent: a chunk may be re-run after a crash before its commit.
 */
export interface UpgradeStep {
  version: number;
  description: string;
  chunk(ctx: StepContext, cursor: string | null): Promise<ChunkResult>;
}

/** The list must climb 1, 2, 3, … so that any stored version has exactly one way forward. */
export function checkStepList(steps: readonly UpgradeStep[]): readonly UpgradeStep[] {
  steps.forEach((s, i) => {
    if (s.version !== i + 1) {
      throw new Error(`upgrade step '${s.description}' has version ${s.version}; expected ${i + 1}`);
    }
  });
  return steps;
}

export const newestVersion = (steps: readonly UpgradeStep[]) => (steps.length ? steps[steps.length - 1].version : 0);
