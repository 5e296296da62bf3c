/**
 * The worker's bindings: `Env` is generated from wrangler.toml by `npm run types` into
 * worker-configuration.d.ts (CI fails when that file is stale), so bindings, vars and required
 * secrets are declared once, in wrangler.toml.
 */
type WorkerEnv = Env;
export type { WorkerEnv as Env };
