/**
 * A stand-in for Harbormaster's two host endpoints that answers at once and keeps nothing but a
 * generation per token: the simulator's calibration runs its hosts against it (in a child
 * process) so the simulator's own CPU per host operation is measured without a real server's
 * delays. Run: `node sim/fake-server.ts` (prints its port).
 */
import { createServer } from "node:http";

const config = (generation: number) =>
  JSON.stringify({
    server_id: "00000000-0000-4000-8000-000000000000",
    generation,
    agents: [0, 1, 2].map((j) => ({
      name: `sim-a${j}`,
      image: `sim/agent-${j}:v1`,
      version: "v1",
      instance_id: `i-${j}`,
    })),
    lifecycle: "run",
  });
const accepted = JSON.stringify({
  server_id: "00000000-0000-4000-8000-000000000000",
  desired_generation: 2,
  status: "realized",
  agents: [],
});

const server = createServer((req, res) => {
  let body = "";
  req.on("data", (d: Buffer) => (body += d));
  req.on("end", () => {
    if (req.method === "GET" && req.url?.startsWith("/v1/agent/desired")) {
      if (req.headers["if-none-match"] === '"2"') {
        res.writeHead(304, { ETag: '"2"' }).end();
      } else {
        res.writeHead(200, { "Content-Type": "application/json", ETag: '"2"' }).end(config(2));
      }
      return;
    }
    if (req.method === "PUT" && req.url === "/v1/agent/inventory") {
      JSON.parse(body);
      res.writeHead(200, { "Content-Type": "application/json" }).end(accepted);
      return;
    }
    res.writeHead(404).end();
  });
});
server.listen(0, "127.0.0.1", () => {
  console.log(JSON.stringify({ port: (server.address() as { port: number }).port }));
});
for (const sig of ["SIGINT", "SIGTERM"] as const) process.on(sig, () => server.close(() => process.exit(0)));
