import { readFileSync } from "node:fs";

/** hm's version: the package's. */
export const VERSION: string = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")).version;
