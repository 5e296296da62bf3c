-- A fresh database has no servers whose FleetLock identity a coordinator could have missed:
-- it starts at data version 2 (upgrade step 2) instead of being drained until a run applies it.
UPDATE `upgrade_state` SET `version` = 2 WHERE `version` = 1 AND NOT EXISTS (SELECT 1 FROM `fleets`);
