/**
 * The report text each server token last had accepted, as it came (with its Content-Type) and as
 * the route's validation turned it into the JSON text the ledger takes. What a body validates to
 * is a pure function of its text and its Content-Type (the media-type gate, the JSON parse, the
 * schema: none reads the clock, the request or storage), so a body the same as that one, text for
 * text and type for type, is sent to the ledger as the JSON text it gave then, without parsing,
 * validating and serializing it again. Any other body takes the route's validators, as before.
 *
 * Keyed by the token's digest, not the server id: only the token that had a report accepted
 * reaches its text, so no other caller can time a comparison against a host's last report, nor
 * replace its entry. Nothing is decided here: the ledger still checks the token and takes the
 * report (a token revoked since is refused there). An entry is written only once a ledger
 * accepted the report. Per isolate, bounded in entries and in characters, emptied when full (like
 * the token digests in src/auth/principal.ts).
 */
interface Known {
  contentType: string;
  text: string;
  canonical: string;
}

const known = new Map<string, Known>();
let knownChars = 0;
const KNOWN_MAX_SERVERS = 4096;
/** About 4 MiB of texts at most: a steady fleet's reports are a few hundred characters each. */
const KNOWN_MAX_CHARS = 4 * 2 ** 20;
/** A larger report is validated every time: no one report holds a large share of the memory. */
const KNOWN_MAX_TEXT = 32 * 1024;

/** The JSON text `text` was validated to when the token of `tokenHash` last had it accepted, or undefined. */
export function knownReport(tokenHash: string, contentType: string | undefined, text: string): string | undefined {
  const k = known.get(tokenHash);
  return k !== undefined && k.text === text && k.contentType === contentType ? k.canonical : undefined;
}

/** Remembers the validated JSON text of `text`, a report the ledger accepted from the token of `tokenHash`. */
export function rememberReport(tokenHash: string, contentType: string | undefined, text: string, canonical: string) {
  if (contentType === undefined || text.length > KNOWN_MAX_TEXT || canonical.length > KNOWN_MAX_TEXT) return;
  const previous = known.get(tokenHash);
  if (previous !== undefined) knownChars -= previous.text.length + previous.canonical.length;
  else if (known.size >= KNOWN_MAX_SERVERS) forgetAll();
  const size = text.length + canonical.length;
  if (knownChars + size > KNOWN_MAX_CHARS) forgetAll();
  known.set(tokenHash, { contentType, text, canonical });
  knownChars += size;
}

function forgetAll() {
  known.clear();
  knownChars = 0;
}
