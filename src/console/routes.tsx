/**
 * The operator console (docs/console.md), served by the Worker at /console: server-rendered pages over
 * the app's own API (called in-process with the session's token), one client module, one
 * stylesheet, one live socket per page. `getApp` is the app this router is mounted in.
 */
import { Hono } from "hono";
import { bodyLimit } from "hono/body-limit";
import type { InProcessApp } from "./api";
import { assetRoutes } from "./assets";
import { Refused, requireSession, securityHeaders, type ConsoleEnv } from "./guard";
import { liveRoutes } from "./feed";
import { page } from "./context";
import { overviewPage } from "./pages/overview";
import { signInRoutes } from "./pages/sign-in";
import { serverPages } from "./pages/servers";
import { groupPages } from "./pages/groups";
import { rolloutPages } from "./pages/rollouts";
import { driftPages } from "./pages/drift";
import { auditPage } from "./pages/audit";
import { enrollmentPages } from "./pages/enrollment";
import { imagesPage } from "./pages/images";
import { historyPages } from "./pages/history";

export function consoleRoutes(getApp: () => InProcessApp) {
  const app = new Hono<ConsoleEnv>();
  app.get("/", (c) => c.redirect("/console", 302));
  app.use("/console/*", securityHeaders);
  app.use("/console", securityHeaders);
  app.use("/console/*", bodyLimit({ maxSize: 16 * 1024 }));
  app.route("/", assetRoutes);
  app.route("/", signInRoutes(getApp));
  app.route("/", liveRoutes);
  app.get("/console", requireSession, page(getApp, "overview", overviewPage));
  app.route("/", serverPages(getApp));
  app.route("/", groupPages(getApp));
  app.route("/", rolloutPages(getApp));
  app.route("/", driftPages(getApp));
  app.get("/console/audit", requireSession, page(getApp, "audit", auditPage));
  app.route("/", enrollmentPages(getApp));
  app.get("/console/images", requireSession, page(getApp, "images", imagesPage));
  app.route("/", historyPages(getApp));
  app.onError((err, c) => {
    if (err instanceof Refused) return c.text(err.message, err.status);
    throw err;
  });
  return app;
}
