// The ledger scenario's fleet for the direct report scripts (./alternate-report.ts,
// ./profile-report.ts): one definition, so both load the same servers.
import { createClient } from "../../src/client/index.ts";
import { AGENTS, hostReport } from "./host-report.ts";

/** 64 servers in a new fleet named from `prefix`, each with its desired config and first report: their tokens. */
export async function registerReportingServers(server: { url: string; admin: string }, prefix: string) {
  const client = createClient(server.url, server.admin);
  const fleet = `${prefix}-${Date.now().toString(36)}`;
  await client.v1.fleets.$post({ json: { id: fleet } });
  const tokens: string[] = [];
  for (let i = 0; i < 64; i++) {
    const s = await (
      await client.v1.servers.$post({ json: { fleet, hostname: `host-${i}.${prefix}`, kind: "managed" } })
    ).json();
    if (!("token" in s)) throw new Error(`server: ${JSON.stringify(s)}`);
    await client.v1.servers[":id"].desired.$put({ param: { id: s.id }, json: { generation: 2, agents: AGENTS } });
    await createClient(server.url, s.token).v1.agent.inventory.$put({ json: hostReport(2) });
    tokens.push(s.token);
  }
  return tokens;
}
