/**
 * The house's layering, checked by `npm run lint:deps` (in CI after the type check):
 * - no import circles anywhere (src/, cli/, sim/, agent/, scripts/);
 * - the toolkits (src/http, src/objects/kit, src/db, src/domain, src/lib, src/env.ts) and the
 *   model (src/model: the server model every feature and the agent share) sit at the
 *   bottom: they import each other and packages, never a feature or the app above them.
 * - the instruments (src/local: the cost meter, its D1 taps, the local entry) stay out of the
 *   deployed worker: nothing else in src/ imports them.
 * Type-only imports count too: a circle of types is still a circle in the design.
 */
const TOOLKITS = "^src/(http|objects/kit|db|domain|lib|model)/|^src/env[.]ts$";

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
