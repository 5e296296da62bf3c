/**
 * A fleet spec's default rollout per agent: `channels.<agent>.rollout`, kept on the agent's
 * channel row (fleet intent, one owner: D1, written through src/intent/batch.ts) and taken by
 * POST /v1/rollouts when the request carries no strategy. Beside the channel because it answers
 * the channel's own question: the channel says which image the fleet wants, its `rollout` how a
 * new one reaches the servers. What only the fleet's servers can judge (label keys, how the plan
 * splits, a Prometheus endpoint's answer) is judged when a rollout starts, as for a strategy sent
 * with the request: a spec is often applied before any host has enrolled.
 */
import { z } from "@hono/zod-openapi";
import { StrategyInput, strategyUrlProblems } from "../model/strategy";
import type { Problem } from "./validate";

export const SpecChannelRollout = z
  .strictObject({
    strategy: StrategyInput.openapi({
      description: "The steps the agent's rollouts take when POST /v1/rollouts names no strategy",
    }),
  })
  .openapi("SpecChannelRollout", {
    description: "How the agent's rollouts go by default (an explicit strategy in the request wins)",
  });
export type SpecChannelRollout = z.infer<typeof SpecChannelRollout>;

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** URLs of the default strategies' analysis checks that Harbormaster may not call, by their place in the spec. */
export function rolloutUrlProblems(raw: unknown, allowLoopbackHttp: boolean): Problem[] {
  if (!isObject(raw) || !isObject(raw.channels)) return [];
  return Object.entries(raw.channels).flatMap(([agent, channel]) =>
    strategyUrlProblems(
      isObject(channel) && isObject(channel.rollout) ? channel.rollout.strategy : undefined,
      allowLoopbackHttp,
    ).map((p) => ({ path: `channels.${agent}.rollout.strategy.${p.path}`, message: `${p.field} ${p.problem}` })),
  );
}
