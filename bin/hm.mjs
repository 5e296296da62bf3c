#!/usr/bin/env node
// `hm` (package.json bin): the CLI is TypeScript, run through tsx's loader.
import { register } from "tsx/esm/api";

register();
await import("../cli/run.ts");
