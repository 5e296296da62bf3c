/**
 * Counts the arrows back up into the ServerLedger object's folder: imports of src/ledger/ from
 * outside it (src/index.ts, which exports the class, aside). Not a gate, a measure (severity info):
 *   npx depcruise src agent cli sim scripts --config .dependency-cruiser.upward.cjs --output-type err
 * The closing line counts them; docs/architecture.md ("Layering") says what they were and are.
 */
const base = require("./.dependency-cruiser.cjs");

/** @type {import("dependency-cruiser").IConfiguration} */
module.exports = {
  ...base,
  forbidden: [
    ...base.forbidden,
    {
      name: "into-the-ledger-folder",
      severity: "info",
      comment:
        "A feature or the agent reaching into the ledger object's folder: what they share belongs in src/model/.",
      from: { path: "^(src|agent|cli|sim|scripts)/", pathNot: ["^src/ledger/", "^src/index[.]ts$"] },
      to: { path: "^src/ledger/" },
    },
  ],
};
