/**
 * Objects as operators type them: a full id, a name, or the first characters of an id (as git's
 * short hashes), resolved through the API's own list so hm never guesses. A prefix that fits
 * several is refused with the candidates; one that fits none says what exists.
 */
import { Exit } from "./io.ts";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export const isUuid = (ref: string) => UUID.test(ref);

/** The shortest prefix a person types to name an id: this many characters at least. */
const MIN_PREFIX = 4;

/**
 * The one item `ref` names among `items`: its id, its name (`nameOf`), else the one id starting
 * with `ref` (at least MIN_PREFIX characters). `what` names the kind in messages ("webhook").
 */
export function pick<T extends { id: string }>(
  items: T[],
  ref: string,
  what: string,
  nameOf?: (item: T) => string | null | undefined,
): T {
  const byId = items.find((i) => i.id === ref);
  if (byId) return byId;
  const named = nameOf ? items.filter((i) => nameOf(i) === ref) : [];
  if (named.length === 1) return named[0];
  if (named.length > 1)
    throw new Exit(
      2,
      `${named.length} ${what}s are named '${ref}': give the id (${named.map((i) => i.id).join(", ")})`,
    );
  const prefixed =
    ref.length >= MIN_PREFIX ? items.filter((i) => i.id.toLowerCase().startsWith(ref.toLowerCase())) : [];
  if (prefixed.length === 1) return prefixed[0];
  if (prefixed.length > 1) {
    throw new Exit(
      2,
      `'${ref}' is the start of ${prefixed.length} ${what} ids (${prefixed
        .slice(0, 5)
        .map((i) => i.id)
        .join(", ")}${prefixed.length > 5 ? ", …" : ""}): type more of it`,
    );
  }
  const known = items.slice(0, 5).map((i) => (nameOf?.(i) ? `${nameOf(i)} (${i.id.slice(0, 8)})` : i.id.slice(0, 8)));
  throw new Exit(
    1,
    `no ${what} '${ref}'${ref.length < MIN_PREFIX && !named.length ? ` (a short id needs at least ${MIN_PREFIX} characters)` : ""}` +
      `; ${items.length ? `known: ${known.join(", ")}${items.length > 5 ? ", …" : ""}` : `there are no ${what}s`}`,
  );
}
