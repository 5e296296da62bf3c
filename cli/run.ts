#!/usr/bin/env node
import { main } from "./main.ts";

// `hm … | head`: once the reader has gone, there is nobody to tell anything; end quietly, as
// cat and kubectl do, instead of an EPIPE stack trace.
for (const stream of [process.stdout, process.stderr]) {
  stream.on("error", (err: NodeJS.ErrnoException) => {
    if (err.code === "EPIPE") process.exit(0);
    throw err;
  });
}

main(process.argv.slice(2)).then((code) => {
  process.exitCode = code;
});
