import { z } from "@hono/zod-openapi";

/**
 * A record whose keys a client chooses (labels, capabilities, a spec's sections), refusing an own
 * `__proto__` key. zod leaves that key out of a record's output without a word (assigning it would
 * set the output's prototype), so a body naming it would be taken as if it had not: a label the
 * client believes set, silently missing. Refused instead, with its path, like any key that does
 * not fit. The input and output types, the OpenAPI document and the JSON Schema are the record's.
 */
export function userKeyed<T extends z.ZodType>(record: T) {
  return z.preprocess<z.input<T>, T, z.input<T>>((value, ctx) => {
    if (typeof value === "object" && value !== null && Object.hasOwn(value, "__proto__"))
      ctx.addIssue({
        code: "custom",
        path: ["__proto__"],
        message: "'__proto__' is not a key this map may have",
        input: value,
      });
    return value;
  }, record);
}
