/** D1 surfaces SQLite constraint failures only through the message text. */
export function isUniqueViolation(err: unknown): boolean {
  const msg = err instanceof Error ? `${err.message} ${(err as { cause?: Error }).cause?.message ?? ""}` : String(err);
  return /UNIQUE constraint failed|SQLITE_CONSTRAINT/i.test(msg);
}
