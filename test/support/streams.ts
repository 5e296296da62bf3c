/** A body of `total` bytes of `fill`, made as it is read, counting how much was pulled and whether it was cancelled. */
export function endless(total: number, fill = 0x61) {
  const seen = { pulled: 0, cancelled: false };
  const chunk = new Uint8Array(64 * 1024).fill(fill);
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (seen.pulled >= total) return controller.close();
      seen.pulled += chunk.byteLength;
      controller.enqueue(chunk);
    },
    cancel() {
      seen.cancelled = true;
    },
  });
  return { body, seen };
}
