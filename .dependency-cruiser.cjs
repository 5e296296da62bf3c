/**
 * The house's layering, checked by `npm run lint:deps` (in CI after the type check):
 * - no import circles anywhere (src/, cli/, sim/, agent/, scripts/);
 * - the toolkits (src/http, src/objects/kit, src/db, src/domain, src/lib, src/env.ts) and the
 *   model (src/model: the server model every feature and the agent share) sit at the
 *   bottom: they import each other and packages, never a feature or the app above them.
 * - the instruments (src/local: the cost meter, its D1 taps, the local entry) stay out of the
 *   deployed worker: nothing else in src/ imports them.
 * - the features keep their floors (docs/architecture.md, "Layering"): the console, the audit
 *   log's reads and the aggregate reads (src/status) on top, imported by nobody but the app; the
 *   ledger's folder reached only by the Worker-side halves of its protocols (src/servers,
 *   src/host); no object file imported from another folder (it exports its class, nothing else);
 *   the planner, the console notices (src/notices) and the fleets feature below the objects;
 *   auth below every feature (src/sso included); fleets below intent and specs; intent below the
 *   servers.
 * Type-only imports count too: a circle of types is still a circle in the design.
 */
const TOOLKITS = "^src/(http|objects/kit|db|domain|lib|model)/|^src/env[.]ts$";
/** The toolkits and the objects' address book: what a low feature may import besides itself. */
const GROUND = `${TOOLKITS}|^src/objects/stubs[.]ts$`;

/** @type {import("dependency-cruiser").IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: "no-circular",
      severity: "error",
      comment:
        "Import circles make the load order matter and the layers meaningless; break them by moving the shared piece down.",
      from: { path: "^(src|cli|sim|agent|scripts)/" },
      to: { circular: true },
    },
    {
      name: "toolkits-import-only-toolkits",
      severity: "error",
      comment:
        "Toolkits are the bottom layer: what they need from a feature is passed in by the caller (src/app.ts wires them).",
      from: { path: TOOLKITS },
      to: { path: "^src/", pathNot: TOOLKITS },
    },
    {
      name: "instruments-stay-local",
      severity: "error",
      comment:
        "The deployed entry (src/index.ts) and everything it reaches run without the meter: only the local entry wraps them.",
      from: { path: "^src/", pathNot: "^src/local/" },
      to: { path: "^src/local/" },
    },
    {
      name: "console-on-top",
      severity: "error",
      comment:
        "The console's pages import every feature's schemas; a feature that imports the console closes a circle. What owners raise for the pages (notices, the feed object, the session-end fan-out) is src/notices/.",
      from: { path: "^src/", pathNot: "^src/(console|local)/|^src/app[.]ts$" },
      to: { path: "^src/console/" },
    },
    {
      name: "reads-of-everything-on-top",
      severity: "error",
      comment:
        "The audit log's reads and the aggregate reads (GET /v1/status, a fleet's summary) read every feature; only the app, the console, the fleets' history (a rollup of those counts) and the cron (the audit trail out) import them. Owners write audit rows through src/db/audit.ts.",
      from: { path: "^src/", pathNot: "^src/(audit|status|history|console|local)/|^src/(app|scheduled)[.]ts$" },
      to: { path: "^src/(audit|status)/" },
    },
    {
      name: "object-files-export-their-class-only",
      severity: "error",
      comment:
        "A durable-object.ts is the object's surface; the types its neighbours share live in src/model/ or in the module that defines them, never re-exported from the class's file.",
      from: { path: "^src/([^/]+)/", pathNot: "^src/local/" },
      to: { path: "^src/[^/]+/durable-object[.]ts$", pathNot: "^src/$1/" },
    },
    {
      name: "into-the-ledger-folder",
      severity: "error",
      comment:
        "Only the Worker-side halves of the ledger's protocols (src/servers, src/host) and the entry import src/ledger/; what others share with the ledger is the server model (src/model/server/), and their ledger-side halves import that, not the ledger.",
      from: { path: "^(src|agent|cli|sim)/", pathNot: "^src/(ledger|servers|host|local)/|^src/index[.]ts$" },
      to: { path: "^src/ledger/" },
    },
    {
      name: "low-features-stay-low",
      severity: "error",
      comment:
        "The planner (pure plan, its runner and its D1 inputs) and the console notices sit right above the toolkits: every object and feature uses them, so they import none.",
      from: { path: "^src/(planner|notices)/" },
      to: { path: "^src/", pathNot: `${GROUND}|^src/(planner|notices)/` },
    },
    {
      name: "fleets-below-the-objects",
      severity: "error",
      comment:
        "Every feature resolves fleets through src/fleets/; it reaches a coordinator only through its stub and types a task's payload by the coordinator's RPC, so it imports no object's or reader's folder.",
      from: { path: "^src/fleets/" },
      to: { path: "^src/(fleetlock|webhooks|rollouts|ledger|servers|upgrades|status|audit|console|check)/" },
    },
    {
      name: "auth-below-the-features",
      severity: "error",
      comment:
        "Every feature guards its routes with src/auth/principal.ts, and src/sso/ mints auth's tokens: who a request is (a token, a Cloudflare Access JWT and the SSO mappings' grant) is decided from auth's own files and the ground, so auth imports no feature but the console notices it closes a revoked token's sockets through.",
      from: { path: "^src/auth/" },
      to: { path: "^src/", pathNot: `${GROUND}|^src/(auth|notices)/` },
    },
    {
      name: "fleets-below-intent-and-specs",
      severity: "error",
      comment:
        "A fleet's row, its PATCH and the intent revision every change of its configuration bumps (changeIntent) are src/fleets/'s; channels and roles (src/intent/), specs and sign-ins build on them from above.",
      from: { path: "^src/fleets/" },
      to: { path: "^src/(intent|specs|sso)/" },
    },
    {
      name: "intent-below-the-servers",
      severity: "error",
      comment:
        "The servers feature reaches the ledger, whose rollout marks reach the rollouts, whose channel moves reach src/intent/: an import from intent to servers closes that loop. Fleet-wide asks of the servers (refresh) go through src/fleets/ and the ledger's stub.",
      from: { path: "^src/intent/" },
      to: { path: "^src/(servers|host|ledger)/" },
    },
    {
      name: "servers-read-no-neighbours",
      severity: "error",
      comment:
        "The servers feature sits below the coordinator's, the rollouts' and the upgrades' folders; what reads them all together is src/status/.",
      from: { path: "^src/servers/" },
      to: { path: "^src/(fleetlock|rollouts|upgrades|webhooks)/" },
    },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
    enhancedResolveOptions: {
      exportsFields: ["exports"],
      conditionNames: ["import", "require", "node", "default", "types"],
    },
  },
};
