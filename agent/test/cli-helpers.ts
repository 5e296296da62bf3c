/** Helpers for the harbormaster-agent command's tests: temp roots, a scripted HTTP server, running the command from the checkout. */
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const repoRoot = resolve(import.meta.dirname, "../..");
/** The pinned Node (24), which runs the command from its .ts sources. */
const NODE = join(repoRoot, "node_modules/node/bin/node");
const MAIN = join(repoRoot, "agent/cli/main.ts");

/** A temp root with a machine-id and a boot_id file the agent is pointed at. */
export function tempHost(label = "hm-agent") {
  const root = mkdtempSync(join(tmpdir(), `${label}-`));
  const machineId = join(root, "machine-id");
  const bootId = join(root, "boot_id");
  writeFileSync(machineId, "0123456789abcdef0123456789abcdef\n");
  writeFileSync(bootId, "11111111-2222-3333-4444-555555555555\n");
  const env = {
    HARBORMASTER_AGENT_MACHINE_ID_FILE: machineId,
    HARBORMASTER_AGENT_BOOT_ID_FILE: bootId,
    HARBORMASTER_AGENT_STATE_DIR: join(root, "state"),
  };
  return { root, machineId, bootId, stateDir: join(root, "state"), env };
}

export interface Recorded {
  method: string;
  url: string;
  headers: IncomingMessage["headers"];
  body: Buffer;
}

/** An HTTP server on loopback that records requests and answers with `handle`. */
export async function scriptedServer(handle: (req: Recorded, res: ServerResponse) => void) {
  const requests: Recorded[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const r = { method: req.method ?? "", url: req.url ?? "", headers: req.headers, body: Buffer.concat(chunks) };
      requests.push(r);
      handle(r, res);
    });
  });
  await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () => new Promise<void>((ok) => server.close(() => ok())),
  };
}

export function json(res: ServerResponse, status: number, body: unknown) {
  res.writeHead(status, { "Content-Type": "application/json" });
  res.end(JSON.stringify(body));
}

/** A server `s` that wants no agents (generation 1) and takes every report as realized. */
export function emptyServer() {
  return scriptedServer((req, res) => {
    if (req.url.startsWith("/v1/agent/desired"))
      return json(res, 200, { server_id: "s", generation: 1, lifecycle: "run", agents: [] });
    if (req.url === "/v1/agent/inventory")
      return json(res, 200, { server_id: "s", desired_generation: 1, status: "realized", agents: [] });
    json(res, 404, { error: { code: "not_found", message: "no" } });
  });
}

/** Runs the command from the checkout (async: a scripted server in this process must keep answering). */
export function agentCmd(
  args: string[],
  env: Record<string, string>,
  input?: string,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolveRun) => {
    const child = spawn(NODE, [MAIN, ...args], { env: { ...process.env, ...env }, stdio: ["pipe", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d));
    child.stderr.on("data", (d: Buffer) => (stderr += d));
    child.stdin.end(input ?? "");
    child.on("close", (code) => resolveRun({ code, stdout, stderr }));
  });
}
