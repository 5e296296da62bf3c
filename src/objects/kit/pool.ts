/**
 * At most `size` tasks at once, each free slot taking the next task as soon as its own is done,
 * in the order they were given (one slot: one after another, in order). Shared by every flush of
 * an outbox, so the bound holds for the object, not per flush. p-limit would fit the Workers
 * runtime (plain JavaScript since it dropped its node:async_hooks binding in 6.0) and queues the
 * same way; it is not used because it brings two packages (p-limit, yocto-queue) for these fifteen
 * lines, and the outbox needs nothing more (no priorities, no pausing, no clearing the queue).
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
