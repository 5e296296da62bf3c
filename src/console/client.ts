/**
 * The console's one client module (served by assets.ts as a content-hashed ES module). Every page
 * works without it; with it:
 * - relative times stay current (a local timer, no request);
 * - one WebSocket per page to the fleet's feed: a notice ("something changed: kind, ids") makes the
 *   page re-fetch itself and swap its `[data-live]` regions, once at once and once more a moment
 *   later, because the index a page reads (D1) lands shortly after the change the notice names;
 *   the socket sends "ping" every 30 s, which the feed answers without waking (auto-response);
 *   a lost socket is shown and reconnected with backoff;
 * - forms marked data-enhance are sent with fetch and the answer's <main> replaces the page's.
 * Kept as a string (no backquotes inside) so the Worker serves it as is; a test parses it.
 */
export const CONSOLE_JS = String.raw`
const body = document.body;
const csrf = body.dataset.csrf || "";
const fleet = body.dataset.fleet || "";
const UNITS = [["y", 31536000], ["mo", 2592000], ["d", 86400], ["h", 3600], ["m", 60], ["s", 1]];

function ago(ms) {
  const s = Math.round((Date.now() - ms) / 1000);
  const abs = Math.abs(s);
  if (abs < 5) return "just now";
  for (const [u, n] of UNITS) if (abs >= n) {
    const v = Math.floor(abs / n);
    return s >= 0 ? v + u + " ago" : "in " + v + u;
  }
  return "just now";
}
function tick() {
  for (const t of document.querySelectorAll("time[data-rel]")) {
    const ms = Date.parse(t.getAttribute("datetime"));
    if (!Number.isNaN(ms)) t.textContent = ago(ms);
  }
}
setInterval(tick, 15000);

const status = document.getElementById("live");
function show(text, on) {
  if (!status) return;
  status.textContent = text;
  status.classList.toggle("on", on);
  status.classList.toggle("off", !on);
}

function signedOut(res) {
  if (res.redirected && new URL(res.url).pathname === "/console/sign-in") { location.assign(res.url); return true; }
  return false;
}

// A region the operator is working in (focus inside it) is left alone until the next notice.
function busy(el) {
  const a = document.activeElement;
  return !!a && a !== document.body && el.contains(a);
}

let refreshing = null;
let again = false;
async function refresh() {
  if (refreshing) { again = true; return refreshing; }
  refreshing = (async () => {
    try {
      const res = await fetch(location.href, { headers: { "X-Console-Refresh": "1" }, credentials: "same-origin" });
      if (signedOut(res) || !res.ok) return;
      const doc = new DOMParser().parseFromString(await res.text(), "text/html");
      for (const fresh of doc.querySelectorAll("[data-live][id]")) {
        const old = document.getElementById(fresh.id);
        if (old && !busy(old)) old.replaceWith(document.importNode(fresh, true));
      }
      tick();
      document.dispatchEvent(new CustomEvent("console:refreshed"));
    } catch (e) {
      // Offline for a moment: the next notice or reconnect refreshes again.
    }
  })();
  await refreshing;
  refreshing = null;
  if (again) { again = false; refresh(); }
}

let settleTimer = 0;
function changed() {
  refresh();
  clearTimeout(settleTimer);
  settleTimer = setTimeout(refresh, 1200);
}

let socket = null;
let attempt = 0;
let pinger = 0;
function connect() {
  if (!fleet || !status) return;
  const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/console/live?fleet=" + encodeURIComponent(fleet);
  socket = new WebSocket(url);
  socket.addEventListener("open", () => {
    const reconnected = attempt > 0;
    attempt = 0;
    show("\u25CF Live", true);
    body.dataset.live = "on";
    clearInterval(pinger);
    pinger = setInterval(() => { if (socket && socket.readyState === 1) socket.send("ping"); }, 30000);
    if (reconnected) changed();
  });
  socket.addEventListener("message", (ev) => {
    if (ev.data === "pong") return;
    let notice = null;
    try { notice = JSON.parse(ev.data); } catch (e) { return; }
    body.dataset.lastNotice = notice.kind || "";
    changed();
  });
  socket.addEventListener("close", (ev) => {
    clearInterval(pinger);
    body.dataset.live = "off";
    // The session ended (expired, signed out here or in another tab, its token revoked): say so on sign-in.
    if (ev.code === 4001) {
      const why = ev.reason === "signed out" ? "signed_out=1" : "ended=1";
      location.assign("/console/sign-in?" + why + "&next=" + encodeURIComponent(location.pathname + location.search));
      return;
    }
    const wait = Math.min(30, 2 ** attempt) * (0.75 + Math.random() * 0.5);
    attempt += 1;
    show("\u25CB Disconnected \u2014 reconnecting in " + Math.ceil(wait) + " s", false);
    setTimeout(connect, wait * 1000);
  });
}

async function submitEnhanced(form, submitter) {
  const data = new FormData(form);
  if (submitter && submitter.name) data.set(submitter.name, submitter.value);
  const buttons = form.querySelectorAll("button");
  for (const b of buttons) b.disabled = true;
  try {
    const res = await fetch(form.action, {
      method: "POST",
      body: new URLSearchParams(data),
      headers: { "X-CSRF-Token": csrf },
      credentials: "same-origin",
    });
    if (signedOut(res)) return;
    const doc = new DOMParser().parseFromString(await res.text(), "text/html");
    const main = doc.querySelector("main");
    if (!main) { location.reload(); return; }
    document.querySelector("main").replaceWith(document.importNode(main, true));
    document.title = doc.title;
    if (res.url && res.url !== location.href) history.replaceState(null, "", res.url);
    const focus = document.querySelector("main .flash") || document.querySelector("main h1");
    if (focus) { focus.setAttribute("tabindex", "-1"); focus.focus(); }
    tick();
  } catch (e) {
    form.submit();
  } finally {
    for (const b of buttons) b.disabled = false;
  }
}

document.addEventListener("submit", (ev) => {
  const form = ev.target;
  if (!(form instanceof HTMLFormElement) || !form.hasAttribute("data-enhance")) return;
  ev.preventDefault();
  submitEnhanced(form, ev.submitter);
});

tick();
connect();
`;
