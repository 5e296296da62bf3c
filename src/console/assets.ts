/**
 * The console's two static assets, served by the Worker itself: names carry a hash of the content,
 * so they are cached for a year and a new deployment's pages name new files.
 */
import { Hono } from "hono";
import { CONSOLE_JS } from "./client";
import { CONSOLE_CSS } from "./styles";

/** FNV-1a, 32 bits: enough to tell versions of one file apart (not a security property). */
function contentHash(text: string) {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h.toString(16).padStart(8, "0");
}

export const ASSETS = {
  js: {
    path: `/console/assets/console.${contentHash(CONSOLE_JS)}.js`,
    body: CONSOLE_JS,
    type: "text/javascript; charset=utf-8",
  },
  css: {
    path: `/console/assets/console.${contentHash(CONSOLE_CSS)}.css`,
    body: CONSOLE_CSS,
    type: "text/css; charset=utf-8",
  },
} as const;

export const assetRoutes = new Hono();
for (const asset of Object.values(ASSETS)) {
  assetRoutes.get(asset.path, (c) =>
    c.body(asset.body, 200, { "Content-Type": asset.type, "Cache-Control": "public, max-age=31536000, immutable" }),
  );
}
