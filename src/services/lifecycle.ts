/**
 * Server lifecycle workflows (issue 8): decommission (and force, cancel) and token rotation. The
 * server's ledger owns each fact and commits first; its outbox and cleanup timer bring the index,
 * the token row and the fleet's coordinator along.
 */
import { issueToken } from "../auth/tokens";
import type { Env } from "../env";
import { notFound, unwrap } from "../http/errors";
import { ledgerOf } from "../ledger/stub";

export async function decommissionServer(env: Env, actor: string, id: string, opts: { force?: { reason: string } }) {
  return unwrap(await ledgerOf(env, id).decommission({ actor, force: opts.force }));
}

export async function cancelDecommission(env: Env, actor: string, id: string) {
  return unwrap(await ledgerOf(env, id).cancelDecommission(actor));
}

/** A new token for the server, answered once; the old one stops working at once. */
export async function rotateServerToken(env: Env, actor: string, id: string) {
  const ledger = ledgerOf(env, id);
  if (!(await ledger.view())) throw notFound("server", id);
  const { token, hash } = await issueToken("server", id);
  const out = unwrap(await ledger.rotateToken(hash, actor));
  return { view: out.view, token };
}
