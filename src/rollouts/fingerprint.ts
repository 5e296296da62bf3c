/**
 * The fingerprint of a start request, kept on its (fleet, agent) claim: a client that lost the
 * answer and sends the same request again is the same start, and adopts the claim (finishing the
 * start if the runtime died between the claim and the object's creation) instead of being refused
 * by it. Pure apart from the digest.
 */
import type { StrategyInput } from "../model/strategy";
import { canonicalJson } from "../lib/canonical-json";
import { sha256Hex } from "../lib/crypto";
import type { StrategySource } from "./machine";
import type { RolloutInput } from "./schemas";

/**
 * What makes two start requests the same start: who asks, and the request as it was resolved
 * (defaults filled in, the image as the catalog named it, the strategy the rollout would take,
 * request's or the fleet's default). The targets are not in it: a start the crash cut off never
 * selected any that anyone saw, and a completed one keeps its own.
 */
export function startFingerprint(
  actor: string,
  input: RolloutInput,
  strategy: StrategyInput | null,
  source: StrategySource,
): Promise<string> {
  const { strategy: _asSent, ...rest } = input;
  return sha256Hex(canonicalJson({ actor, ...rest, strategy, strategy_source: source }));
}
