// What one refresh of a watched host's leased index row costs (src/ledger/projection.ts: once a
// lease, carried by the first report past it), as the meter measures it on the channel
// (test/meter.test.ts pins these figures): the cost benchmark adds it by arithmetic, once a lease,
// because its 60 s steady window cannot see an hourly event. No alarm is set for it.
export const LEASE_REFRESH_ROWS = {
  /** One UPDATE of last_seen and stale_at: the row and its three indexes that hold them. */
  d1RowsWritten: 4,
  d1RowsRead: 1,
  /**
   * The heartbeat persisted before the index may show it, and the projection's mark. The refresh
   * is offered to the outbox, not stored in it (src/ledger/effects.ts, projectHeartbeat): it was
   * 6 rows when stored (the effect's row and two indexes, then its removal).
   */
  doRowsWritten: 2,
  /**
   * Beyond what the same report reads when no refresh is due (7 when stored, 3 while the ledger
   * read the projection's mark from storage on every report rather than once after each write).
   */
  doRowsRead: 2,
};
