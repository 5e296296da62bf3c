/**
 * The ledger's sockets, all hibernatable: the host channel (./channel.ts) and the waiters of HTTP
 * long polls held in the Worker (./waits.ts). The surface hands its `fetch` (the upgrades) and
 * `webSocketMessage` here, and every store write tells `changed`, which wakes what waits and
 * pushes to the host once the writing turn is over (a transaction's several writes are one push).
 */
import type { SocketRoom } from "../objects/kit/sockets";
import { HOST_TAG, CHANNEL_PATH, connectHost, hostMessage, pushToHosts, restoreHeartbeat } from "./channel";
import { project } from "./effects";
import type { LedgerParts } from "./parts";
import { WAITER_TAG } from "../objects/kit/wake";
import { openPollWait, openViewWait, restorePollHeartbeat, WAIT_PATHS, wakeWaits } from "./waits";

export class LedgerSockets {
  private pending = false;
  /** Host sockets seen closing in this wake (the runtime may still list them meanwhile). */
  private readonly gone = new WeakSet<WebSocket>();
  /**
   * False only once a listing found no socket at all, and true again as soon as one is accepted:
   * a write (a heartbeat above all) with nothing to wake then lists no socket. Memory only: a new
   * instance (after an eviction, with sockets hibernating) starts true and lists once.
   */
  private maybeSockets = true;
  private readonly room: SocketRoom;

  constructor(
    private readonly d: LedgerParts,
    room: SocketRoom,
  ) {
    this.room = {
      ...room,
      accept: (...args) => {
        this.maybeSockets = true;
        return room.accept(...args);
      },
    };
  }

  /**
   * An upgrade from the Worker: the host's channel, or a waiter. `enqueued`: the outbox has
   * something to deliver; `trim`: a timer was cancelled, so the alarm may be earlier than needed.
   */
  open(request: Request): { response: Response; enqueued: boolean; trim?: boolean } {
    const { pathname } = new URL(request.url);
    if (pathname === WAIT_PATHS.poll) return openPollWait(this.d, this.room, request);
    const only = (response: Response) => ({ response, enqueued: false });
    if (pathname === CHANNEL_PATH) {
      const response = connectHost(this.d, this.room, request);
      // Accepted: the host is back, and its absence no longer needs timing.
      return { response, enqueued: false, trim: response.status === 101 && this.d.quiet.back() };
    }
    if (pathname === WAIT_PATHS.view) return only(openViewWait(this.d.store, this.room, request, this.d.clock()));
    return only(new Response(null, { status: 404 }));
  }

  /** A message on one of the sockets; true when the outbox has something to deliver. Waiters never speak. */
  message(ws: WebSocket, raw: string | ArrayBuffer): boolean {
    if (!this.room.tags(ws).includes(HOST_TAG)) return false;
    const enqueued = hostMessage(this.d, ws, raw);
    // Closed for what it sent (a flood, a token gone): gone as if the host had closed it.
    return ws.readyState === WebSocket.OPEN ? enqueued : this.hostGone(ws) || enqueued;
  }

  /** Whether the host is connected on the channel now. */
  hostConnected(): boolean {
    if (!this.maybeSockets) return false;
    return this.room.list(HOST_TAG).some((ws) => !this.gone.has(ws) && ws.readyState === WebSocket.OPEN);
  }

  /**
   * A socket closed. When it was the host's last, the index is told at once (its staleness is
   * exact again: ./projection.ts); true when the outbox has something to deliver.
   */
  closed(ws: WebSocket): boolean {
    // A poll's waiter closing needs nothing here: a ledger that slept read its heartbeat back on waking for the close.
    return this.room.tags(ws).includes(HOST_TAG) && this.hostGone(ws);
  }

  /** A host socket closed (or is being closed here): its heartbeat is stored, and the index told if it was the last. */
  private hostGone(ws: WebSocket): boolean {
    if (this.gone.has(ws)) return false;
    this.gone.add(ws);
    if (!this.d.store.load()) return false;
    // The heartbeat the socket kept goes to storage with it.
    restoreHeartbeat(this.d.store, [ws], true);
    if (this.hostConnected()) return false;
    project(this.d.outbox);
    // Its staleness, when it comes, is told to the coordinator's gates by the left timer (./quiet.ts).
    const state = this.d.store.load();
    if (state?.report) this.d.quiet.left(state.report.received_at, state.record.stale_after_s);
    return true;
  }

  /** When the ledger wakes: its host's heartbeat, kept by its channel socket or its poll's waiter while it slept. */
  restoreHeartbeat() {
    restoreHeartbeat(this.d.store, this.room.list(HOST_TAG));
    restorePollHeartbeat(this.d.store, this.room.list(WAITER_TAG));
  }

  /** After every store write, in the writer's turn: the wake-ups go out once the turn is over. */
  changed() {
    if (this.pending || !this.maybeSockets) return;
    this.pending = true;
    queueMicrotask(() => {
      this.pending = false;
      // Nothing to wake or push to: later writes skip even this, until a socket is accepted.
      if (this.room.list(WAITER_TAG).length === 0 && this.room.list(HOST_TAG).length === 0) {
        this.maybeSockets = false;
        return;
      }
      wakeWaits(this.d.store, this.room, this.d.clock());
      // A socket closed here for its token is gone as one the host closed (its close event finds it gone).
      pushToHosts(this.d.store, this.room, (ws) => this.hostGone(ws));
    });
  }
}
