/**
 * update_channel: the fleet's channel for the agent moves to the rollout's image when the rollout
 * starts (servers registered meanwhile get it) and back when it is rolled back.
 *
 * Channels belong to the fleet-intent work (issue 8), which this build does not contain yet. Until
 * it does, moving a channel is a no-op answering `updated: false`; the rollout records that as
 * `channel_updated: false`, so an operator sees that new servers are not set up with the image.
 */
import type { Env } from "../env";

export interface ChannelImage {
  image: string;
  version: string;
}

export interface ChannelMove {
  updated: boolean;
  /** The channel before the move (what a rollback restores); null when there was none. */
  previous: ChannelImage | null;
}

export async function moveChannel(
  _env: Env,
  _fleet: string,
  _agent: string,
  _to: ChannelImage,
  _actor: string,
): Promise<ChannelMove> {
  return { updated: false, previous: null };
}
