// Small helpers the scenarios share.

/** The JSON of a 2xx answer; anything else fails the scenario, naming the step. */
export async function ok(res: Response, what: string) {
  if (!res.ok) throw new Error(`${what}: ${res.status} ${await res.text()}`);
  return res.json() as Promise<any>;
}

/** Runs `fn` over the items, `n` at a time. */
export async function pool<T>(items: T[], n: number, fn: (item: T, i: number) => Promise<void>) {
  let next = 0;
  await Promise.all(
    Array.from({ length: n }, async () => {
      while (next < items.length) {
        const i = next++;
        await fn(items[i], i);
      }
    }),
  );
}
