/**
 * R2 operations by billing class, for the local cost meter (./meter.ts): R2 bills Class A
 * (writes, lists, multipart steps) and Class B (reads, heads) per million, storage per GB-month,
 * and nothing for egress or deletes (https://developers.cloudflare.com/r2/pricing/). The local
 * entry hands each sender the bucket wrapped (`meteredBucket`, ./meter.ts); a deployment's is bare.
 */
export const r2Ops = { class_a: 0, class_b: 0, free: 0, bytes_read: 0 };

export function resetR2Ops() {
  r2Ops.class_a = r2Ops.class_b = r2Ops.free = r2Ops.bytes_read = 0;
}

const A = new Set(["put", "createMultipartUpload", "list"]);
const B = new Set(["get", "head"]);

function meteredUpload(upload: R2MultipartUpload): R2MultipartUpload {
  return new Proxy(upload, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== "function") return value;
      return (...args: unknown[]) => {
        if (prop === "uploadPart" || prop === "complete") r2Ops.class_a++;
        else if (prop === "abort") r2Ops.free++;
        return value.apply(target, args);
      };
    },
  });
}

const wrapped = new WeakMap<R2Bucket, R2Bucket>();

/** The bucket, counting each operation by its billing class. */
export function meteredBucket(bucket: R2Bucket): R2Bucket {
  const known = wrapped.get(bucket);
  if (known) return known;
  const proxy = new Proxy(bucket, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== "function") return value;
      return (...args: unknown[]) => {
        const name = String(prop);
        if (A.has(name)) r2Ops.class_a++;
        else if (B.has(name)) r2Ops.class_b++;
        else if (name === "delete") r2Ops.free++;
        const out = value.apply(target, args);
        if (name === "resumeMultipartUpload") return meteredUpload(out as R2MultipartUpload);
        if (name === "createMultipartUpload") return (out as Promise<R2MultipartUpload>).then(meteredUpload);
        if (name === "get") {
          return (out as Promise<R2ObjectBody | null>).then((o) => {
            if (o)
              r2Ops.bytes_read +=
                o.range && "length" in o.range && o.range.length !== undefined ? o.range.length : o.size;
            return o;
          });
        }
        return out;
      };
    },
  });
  wrapped.set(bucket, proxy);
  return proxy;
}
