/**
 * The index's natural sort key for a hostname, so `GET /v1/servers` pages sim-2 before sim-10 as
 * people count (and the console and `hm servers` are natural across pages, not only within one).
 *
 * Each run of digits becomes one character naming its length (leading zeros dropped) followed by
 * the digits: a longer number sorts after a shorter one, equal lengths compare digit by digit.
 * The length character is `0` + length, so for runs of 1 to 9 digits it is itself a digit and the
 * key keeps the hostname's order against `-`, `.` and letters (hostnames are lowercase ASCII);
 * longer runs use `:`…`` ` `` (still below `a`), capped there since no hostname label is longer.
 */
export function hostnameSortKey(hostname: string): string {
  return hostname.toLowerCase().replace(/\d+/g, (run) => {
    const digits = run.replace(/^0+(?=\d)/, "");
    return String.fromCharCode(0x30 + Math.min(digits.length, 0x30)) + digits;
  });
}
