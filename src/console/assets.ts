/** The favicon: the anchor of the header on the accent colour, drawn (no font needed). */
const FAVICON = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="7" fill="#0b5cad"/><g fill="none" stroke="#fff" stroke-width="2.6" stroke-linecap="round" stroke-linejoin="round"><circle cx="16" cy="7" r="2.8"/><path d="M16 10v17M10 14.5h12M6.5 19a9.5 8 0 0 0 19 0"/></g></svg>`;

/**
 * The console's static assets (script, stylesheet, favicon), served by the Worker itself: names carry a hash of the content,
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
  icon: {
    path: `/console/assets/favicon.${contentHash(FAVICON)}.svg`,
    body: FAVICON,
    type: "image/svg+xml",
  },
} as const;

export const assetRoutes = new Hono();
// Browsers ask for /favicon.ico by themselves (a JSON page, a tab, a bookmark): send them to the icon.
assetRoutes.get("/favicon.ico", (c) => c.redirect(ASSETS.icon.path, 301));
for (const asset of Object.values(ASSETS)) {
  assetRoutes.get(asset.path, (c) =>
    c.body(asset.body, 200, { "Content-Type": asset.type, "Cache-Control": "public, max-age=31536000, immutable" }),
  );
}
