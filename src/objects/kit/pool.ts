/**
 * At most `size` tasks at once, each free slot taking the next task as soon as its own is done,
 * in the order they were given (one slot: one after another, in order). Shared by every flush of
 * an outbox, so the bound holds for the object, not per flush.
 *
 * A task may name a lane (the receiver it calls): a lane runs one task at a time, in the order
 * given, and a task whose lane is busy waits without a slot while later tasks of other lanes take
 * the free ones. So a receiver that hangs holds one slot, and only its own calls wait behind it.
 * Tasks without a lane are bound by the slots alone.
 *
 * The order given is the order the outbox hands calls over, not quite their enqueue order: a keyed
 * row replaced by a newer payload keeps its first id and goes ahead of rows enqueued after it, and
 * a retry after its backoff goes behind rows enqueued meanwhile. A task ends, and frees its lane,
 * when the outbox's deadline fails the call, while the receiver may still be working on it.
 *
 * p-limit would fit the Workers runtime (plain JavaScript since it dropped its node:async_hooks
 * binding in 6.0) but has no lanes, and it brings two packages (p-limit, yocto-queue) for these
 * lines; the outbox needs nothing more (no priorities, no pausing, no clearing the queue).
 */
export class Pool {
  private running = 0;
  private readonly queue: { lane: string | undefined; start: () => void }[] = [];
  private readonly busy = new Set<string>();

  constructor(private readonly size: number) {}

  run<T>(task: () => Promise<T>, lane?: string): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const start = () => {
        this.running++;
        if (lane !== undefined) this.busy.add(lane);
        // Through a resolved promise, so a task that throws at once still frees its slot.
        Promise.resolve()
          .then(task)
          .then(resolve, reject)
          .finally(() => {
            this.running--;
            if (lane !== undefined) this.busy.delete(lane);
            this.next();
          });
      };
      this.queue.push({ lane, start });
      this.next();
    });
  }

  /** Starts queued tasks in order while a slot is free, passing over those whose lane is busy. */
  private next() {
    for (let i = 0; i < this.queue.length && this.running < this.size;) {
      const { lane, start } = this.queue[i];
      if (lane !== undefined && this.busy.has(lane)) i++;
      else {
        this.queue.splice(i, 1);
        start();
      }
    }
  }
}
