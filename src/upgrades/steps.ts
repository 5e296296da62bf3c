import { checkStepList, newestVersion } from "./step";
import { activateReportedServers } from "./steps/activate-reported-servers";
import { adoptFleetlockIdentities } from "./steps/adopt-fleetlock-identities";
import { giveServersSortKeys } from "./steps/give-servers-sort-keys";

/**
 * Every data upgrade step, oldest first; version N takes data from N-1 to N. Version 0 is the
 * foundation release's data. Append only: a shipped step is never edited or removed, because some
 * database somewhere may still be below it.
 *
 * Fresh installs: migration 0001 starts an empty database at version 1. When you append step N,
 * add a migration that does the same for N
 * (`UPDATE upgrade_state SET version = N WHERE version = N - 1 AND NOT EXISTS (SELECT 1 FROM fleets)`),
 * or a fresh database is drained until its first run applies N to no data.
 */
export const UPGRADE_STEPS = checkStepList([activateReportedServers, adoptFleetlockIdentities, giveServersSortKeys]);

export const NEWEST_VERSION = newestVersion(UPGRADE_STEPS);
