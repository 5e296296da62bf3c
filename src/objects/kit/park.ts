/**
 * Calls parked inside an object until something settles them or their time runs out: the one
 * way every object parks a call. Parked calls are in memory only (they are open connections);
 * whatever must survive the object (a queue entry, a generation) is durable elsewhere.
 *
 * A parked call keeps its object awake (and billed) until it is answered, so only park where a
 * caller cannot wait elsewhere, and never for longer than the caller will.
 */
/**
 * Told of every call parked and answered, so the local cost meter (./meter.ts) can count parked
 * calls per object from outside the object: a Parking reports to the observer that was current
 * when it was created (the meter makes its object's observer current while the object's
 * constructor, and the synchronous part of each call, runs). None outside the meter.
 */
export interface ParkObserver {
  parked(): void;
  answered(): void;
}

let currentObserver: ParkObserver | null = null;

/** Makes `observer` the one new Parkings report to, until the returned restore runs. */
export function observeNewParkings(observer: ParkObserver | null): () => void {
  const previous = currentObserver;
  currentObserver = observer;
  return () => {
    currentObserver = previous;
  };
}

interface Parked<V> {
  ticket: string;
  settle: (value: V) => void;
  timer: ReturnType<typeof setTimeout>;
}

export class Parking<V> {
  private byKey = new Map<string, Parked<V>[]>();
  private readonly observer = currentObserver;

  /** Whether any call is parked under the key. */
  has(key: string) {
    return (this.byKey.get(key)?.length ?? 0) > 0;
  }

  /** How many calls are parked, over every key. */
  count() {
    let n = 0;
    for (const list of this.byKey.values()) n += list.length;
    return n;
  }

  /**
   * Parks a call under `key` until `settle(key, …)` answers it, or until `delayMs` has passed;
   * then `onTimeout` runs (it decides the answer, usually by settling the key) and, if it did not
   * settle this call, the call is answered with `timeoutValue`. Several calls may share a key.
   */
  park(key: string, delayMs: number, timeoutValue: V, onTimeout?: () => void, ticket: string = crypto.randomUUID()): Promise<V> {
    return new Promise<V>((resolve) => {
      const parked: Parked<V> = {
        ticket,
        settle: resolve,
        timer: setTimeout(() => {
          onTimeout?.();
          this.leave(key, ticket, timeoutValue);
        }, Math.max(0, delayMs)),
      };
      const list = this.byKey.get(key) ?? [];
      list.push(parked);
      this.byKey.set(key, list);
      this.observer?.parked();
    });
  }

  /** Answers every call parked under the key. */
  settle(key: string, value: V) {
    const list = this.byKey.get(key);
    if (!list) return 0;
    this.byKey.delete(key);
    for (const p of list) {
      clearTimeout(p.timer);
      this.observer?.answered();
      p.settle(value);
    }
    return list.length;
  }

  /** Answers every parked call. */
  settleAll(value: V) {
    for (const key of [...this.byKey.keys()]) this.settle(key, value);
  }

  /** One call stops waiting (its connection went, or its time ran out); the others stay. */
  leave(key: string, ticket: string, value: V) {
    const list = this.byKey.get(key);
    const p = list?.find((x) => x.ticket === ticket);
    if (!list || !p) return false;
    clearTimeout(p.timer);
    const rest = list.filter((x) => x !== p);
    if (rest.length) this.byKey.set(key, rest);
    else this.byKey.delete(key);
    this.observer?.answered();
    p.settle(value);
    return true;
  }
}
