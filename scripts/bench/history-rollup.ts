// What the fleet history's rollup (src/history/) costs in D1, as test/history.test.ts measures it
// (and pins these figures): the cost benchmark adds it by arithmetic, once a period, because its
// steady window holds at most one rollup (the first cron tick of a 5-minute period).
export const HISTORY_ROLLUP_ROWS = {
  /**
   * Read per server of a fleet each rollup, its agent instance included (one agent a server): the
   * two aggregates scan a server's index entry and its instance, and D1 counts the grouping's
   * sort again. The fixed part (the fleets, each fleet's last row, the cursor, the pruning) is
   * a few rows per fleet.
   */
  d1RowsReadPerServer: 4,
  /** Written by a rollup in which nothing changed: nothing (the period's cursor goes with a change's rows). */
  d1RowsWrittenPerRollup: 0,
  /**
   * Written by a rollup in which a fleet's figures changed: its row, its primary key's and its
   * `at` index's entries, and the period's cursor (one a rollup, however many fleets changed).
   */
  d1RowsWrittenPerChange: 4,
};
