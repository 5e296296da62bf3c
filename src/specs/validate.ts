/**
 * Every problem of a spec at once, each with its place in the document: what its schema refuses
 * (zod's issues), and the references the schema cannot see — a role's agent needs a channel, in
 * the spec or (unless pruning, which removes the fleet's others) in the fleet, and the spec must
 * be the fleet's it is sent to. Reads the raw document defensively, so the references are checked
 * even when the schema failed elsewhere.
 */
import type { ZodError } from "zod";
import { outboundUrlProblem } from "../lib/url";

export interface Problem {
  path: string;
  message: string;
}

export const schemaProblems = (error: ZodError): Problem[] =>
  error.issues.map((i) => ({ path: i.path.map(String).join(".") || "(document)", message: i.message }));

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** `fleetChannels`: the fleet's channels that count (none when pruning). */
export function referenceProblems(raw: unknown, fleet: string, fleetChannels: readonly string[]): Problem[] {
  if (!isObject(raw)) return [];
  const problems: Problem[] = [];
  if (typeof raw.fleet === "string" && raw.fleet !== fleet) {
    problems.push({ path: "fleet", message: `the spec is fleet '${raw.fleet}''s, sent to fleet '${fleet}'` });
  }
  const known = new Set([...fleetChannels, ...(isObject(raw.channels) ? Object.keys(raw.channels) : [])]);
  const where = fleetChannels.length ? "in the spec or the fleet" : "in the spec";
  for (const [role, profile] of isObject(raw.roles) ? Object.entries(raw.roles) : []) {
    const agents = isObject(profile) && Array.isArray(profile.agents) ? profile.agents : [];
    agents.forEach((agent, i) => {
      if (!isObject(agent) || typeof agent.name !== "string" || known.has(agent.name)) return;
      problems.push({
        path: `roles.${role}.agents.${i}.name`,
        message: `agent '${agent.name}' has no channel ${where}`,
      });
    });
  }
  return problems;
}

/**
 * Webhook URLs Harbormaster may not call (the webhooks API's rule: HTTPS, or http to loopback in
 * local runs); a URL the schema already refuses (not http(s) at all) is its problem, not listed twice.
 */
export function webhookUrlProblems(raw: unknown, allowLoopbackHttp: boolean): Problem[] {
  if (!isObject(raw) || !isObject(raw.webhooks)) return [];
  const problems: Problem[] = [];
  for (const [name, hook] of Object.entries(raw.webhooks)) {
    if (!isObject(hook) || typeof hook.url !== "string" || !/^https?:\/\//.test(hook.url)) continue;
    const problem = outboundUrlProblem(hook.url, allowLoopbackHttp);
    if (problem) problems.push({ path: `webhooks.${name}.url`, message: `url ${problem}` });
  }
  return problems;
}
