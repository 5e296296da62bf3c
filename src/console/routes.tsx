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
import { errorPage, page } from "./context";
import { currentSession } from "./session";
import { logError } from "../http/log";
import { fleetsPage } from "./pages/fleets";
import { overviewPage } from "./pages/overview";
import { signInRoutes } from "./pages/sign-in";
import { sessionPages } from "./pages/sessions";
import { serverPages } from "./pages/servers";
import { groupPages } from "./pages/groups";
import { rolloutPages } from "./pages/rollouts";
import { driftPages } from "./pages/drift";
import { auditPage } from "./pages/audit";
import { enrollmentPages } from "./pages/enrollment";
import { imagesPage } from "./pages/images";
import { mePage } from "./pages/me";
import { historyPages } from "./pages/history";

const MAX_FORM_BYTES = 16 * 1024;

export function consoleRoutes(getApp: () => InProcessApp) {
  const app = new Hono<ConsoleEnv>();
  app.get("/", (c) => c.redirect("/console", 302));
  app.use("/console/*", securityHeaders);
  app.use("/console", securityHeaders);
  // A console form is a few fields; a larger body is refused as a page, not as the 500 an
  // unhandled HTTPException would become.
  app.use(
    "/console/*",
    bodyLimit({
      maxSize: MAX_FORM_BYTES,
      onError: () => {
        throw new Refused(413, `Refused: a console form is at most ${MAX_FORM_BYTES / 1024} KB.`);
      },
    }),
  );
  app.route("/", assetRoutes);
  app.route("/", signInRoutes(getApp));
  app.route("/", liveRoutes);
  app.get("/console", requireSession, page(getApp, "overview", overviewPage));
  app.get("/console/fleets", requireSession, page(getApp, "fleets", fleetsPage));
  app.route("/", serverPages(getApp));
  app.route("/", groupPages(getApp));
  app.route("/", rolloutPages(getApp));
  app.route("/", driftPages(getApp));
  app.get("/console/audit", requireSession, page(getApp, "audit", auditPage));
  app.route("/", enrollmentPages(getApp));
  app.get("/console/images", requireSession, page(getApp, "images", imagesPage));
  app.get("/console/me", requireSession, page(getApp, undefined, mePage));
  app.route("/", historyPages(getApp));
  app.route("/", sessionPages(getApp));
  // Any other console address (a server id that is not one, a mistyped page) is a page that says so:
  // without this the API's 405 finder, which reads `:id{uuid}` as any segment, answered JSON.
  app.get("/console/*", async (c) => {
    const session = await currentSession(c);
    return errorPage(c, 404, "There is no console page at this address.", {
      session,
      detail: `${c.req.path} is not a page of the console, or names something in a way the console does not know.`,
    });
  });
  app.onError(async (err, c) => {
    if (err instanceof Refused) return errorPage(c, err.status, err.message);
    // The same log line as the API's own unhandled errors; the page names no internals.
    logError(c as unknown as Parameters<typeof logError>[0], err);
    const session = await currentSession(c).catch(() => null);
    return errorPage(c, 500, "The console could not build this page; the worker's log has the error.", { session });
  });
  return app;
}
