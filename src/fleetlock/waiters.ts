/**
 * The parked pre-reboot requests the coordinator can still answer, in memory: a queue entry is
 * durable (queue.ts, in storage), its waiters are not — they are the open connections. A host
 * with no waiter left (it went away, or the object restarted under it) keeps its place; if its
 * turn comes, its grant is kept unclaimed for it (queue.ts UNCLAIMED_GRANT_S).
 */
export type WaitOutcome = { granted: true } | { granted: false; group: string };

interface Waiter {
  ticket: string;
  group: string;
  settle: (o: WaitOutcome) => void;
  timer: ReturnType<typeof setTimeout>;
}

export class Waiters {
  private byId = new Map<string, Waiter[]>();

  has(id: string) {
    return (this.byId.get(id)?.length ?? 0) > 0;
  }

  count() {
    let n = 0;
    for (const list of this.byId.values()) n += list.length;
    return n;
  }

  /**
   * Waits until `settle` is called for the id, or until `untilMs` (then `onTimeout` decides the
   * answer, in the coordinator's turn). Several requests of one id wait for the same entry.
   */
  wait(id: string, group: string, ticket: string, delayMs: number, onTimeout: () => void): Promise<WaitOutcome> {
    return new Promise<WaitOutcome>((resolve) => {
      const waiter: Waiter = {
        ticket,
        group,
        settle: resolve,
        timer: setTimeout(onTimeout, Math.max(0, delayMs)),
      };
      const list = this.byId.get(id) ?? [];
      list.push(waiter);
      this.byId.set(id, list);
    });
  }

  /** Answers every waiter of the id. */
  settle(id: string, outcome: WaitOutcome) {
    const list = this.byId.get(id);
    if (!list) return;
    this.byId.delete(id);
    for (const w of list) {
      clearTimeout(w.timer);
      w.settle(outcome);
    }
  }

  /** One waiter's connection went: it stops waiting, the id's entry stays. */
  leave(id: string, ticket: string) {
    const list = this.byId.get(id);
    const w = list?.find((x) => x.ticket === ticket);
    if (!list || !w) return false;
    clearTimeout(w.timer);
    const rest = list.filter((x) => x !== w);
    if (rest.length) this.byId.set(id, rest);
    else this.byId.delete(id);
    w.settle({ granted: false, group: w.group });
    return true;
  }
}
