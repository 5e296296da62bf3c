/**
 * The first bytes of an outsider's answer (a webhook receiver, a Prometheus server), the rest left
 * unread. `res.text()` would hold all of it in the object that asked, whatever its size: a receiver
 * answering an endless body would fill a fleet's coordinator's memory on every retry.
 */
export async function textPrefix(res: Response, maxBytes: number): Promise<{ text: string; truncated: boolean }> {
  if (!res.body) return { text: "", truncated: false };
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  let truncated = false;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      size += value.byteLength;
      if (size > maxBytes) {
        truncated = true;
        break;
      }
    }
  } finally {
    if (truncated) await reader.cancel().catch(() => {});
    reader.releaseLock();
  }
  const bytes = new Uint8Array(Math.min(size, maxBytes));
  let at = 0;
  for (const chunk of chunks) {
    if (at >= bytes.length) break;
    const part = chunk.subarray(0, bytes.length - at);
    bytes.set(part, at);
    at += part.byteLength;
  }
  return { text: new TextDecoder().decode(bytes), truncated };
}
