/**
 * The access section of a fleet spec (pure): who gets what on this fleet when they sign in through
 * SSO. A key names a group or an email (`group:platform`, `email:ana@example.com`), its value a
 * scope. Each row is kept in `fleet_sso_mappings` under the spec's fleet and read at sign-in as a
 * mapping on that one fleet (src/auth/sso-mapping.ts `specRule`): a spec cannot reach another fleet by
 * construction, whatever its keys say.
 *
 * An apply grants what it writes, so it may add, change or remove only rows at or below the
 * applier's own scope (as a token creates tokens up to its own): a `write` token can give a group
 * `read` or `write` on its fleet, never `admin`, and cannot take an `admin` row away either.
 */
import { scopeRank } from "../auth/tokens";
import type { Scope } from "../domain/enums";
import { accessKeyMatch } from "../auth/sso-mapping";
import { byKey } from "./canonical";
import type { DiffItem } from "./schemas";
import type { Problem } from "./validate";

/** A fleet's access rows as its spec shows them: key → scope, sorted by key. */
export const accessForm = (rows: readonly { kind: "email" | "group"; value: string; scope: Scope }[]) =>
  byKey(rows.map((r) => [`${r.kind}:${r.value}`, r.scope])) as Record<string, Scope>;

export interface AccessRowChange {
  kind: "email" | "group";
  value: string;
  /** The scope the row gets; null: the row is removed. */
  scope: Scope | null;
}

/** What an apply writes to the fleet's access rows: one change per item added, changed or removed. */
export const accessChanges = (items: readonly DiffItem[]): AccessRowChange[] =>
  items
    .filter((i) => i.section === "access" && i.op !== "unlisted")
    .map((i) => ({ ...accessKeyMatch(i.name), scope: i.op === "remove" ? null : (i.after as Scope) }));

/**
 * The access items an applier with scope `applier` may not write: each with its path, so the
 * whole apply is refused with every one of them and nothing is written.
 */
export function accessAboveApplier(items: readonly DiffItem[], applier: Scope): Problem[] {
  const problems: Problem[] = [];
  for (const i of items) {
    if (i.section !== "access" || i.op === "unlisted") continue;
    const above = [i.before, i.after].find(
      (s): s is Scope => typeof s === "string" && scopeRank(s as Scope) > scopeRank(applier),
    );
    if (!above) continue;
    const verb = i.op === "add" ? "grant" : i.op === "remove" ? "remove" : "change";
    problems.push({
      path: `access.${i.name}`,
      message: `a '${applier}' token cannot ${verb} '${above}' access: a spec grants at most the applying token's scope`,
    });
  }
  return problems;
}
