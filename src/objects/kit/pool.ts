/**
 * At most `size` tasks at once, each free slot taking the next task as soon as its own is done,
 * in the order they were given (one slot: one after another, in order). Shared by every flush of
 * an outbox, so the bound holds for the object, not per flush. Hand-written rather than p-limit:
 * fifteen lines with no dependency and no async-context wrapper for the Workers runtime to carry,
 * and the outbox needs nothing else from a library (no priorities, no pausing).
 */
export class Pool {
  private running = 0;
  private readonly queue: (() => void)[] = [];

  constructor(private readonly size: number) {}

  run<T>(task: () => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const start = () => {
        this.running++;
        // Through a resolved promise, so a task that throws at once still frees its slot.
        Promise.resolve()
          .then(task)
          .then(resolve, reject)
          .finally(() => {
            this.running--;
            this.queue.shift()?.();
          });
      };
      if (this.running < this.size) start();
      else this.queue.push(start);
    });
  }
}
