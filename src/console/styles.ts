/**
 * The console's one stylesheet, served by the Worker under a content-hashed name (assets.ts).
 * System fonts only; light and dark follow prefers-color-scheme; status is never colour alone
 * (every badge carries an icon and its word).
 */
export const CONSOLE_CSS = `
:root{color-scheme:light dark;--bg:#f6f7f9;--panel:#fff;--fg:#16191d;--muted:#555d68;--line:#d5dae1;--accent:#0b5cad;
--ok:#1a7f37;--warn:#8a5a00;--bad:#b42318;--info:#0b5cad;--idle:#5b6470;--focus:#1d6fd6;--chip:#eef1f5}
@media (prefers-color-scheme:dark){:root{--bg:#111418;--panel:#191d23;--fg:#e6e9ee;--muted:#a6aeb9;--line:#323944;
--accent:#7db4f5;--ok:#5fd37a;--warn:#f0b64a;--bad:#ff7b72;--info:#7db4f5;--idle:#a6aeb9;--focus:#8ab8ff;--chip:#242a32}}
*{box-sizing:border-box}
html{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans",sans-serif;background:var(--bg);color:var(--fg)}
body{margin:0}
a{color:var(--accent)}
:focus-visible{outline:3px solid var(--focus);outline-offset:2px}
svg.chart{display:block;width:100%;max-width:760px;height:auto}.history figure,figure.history{margin:0}
svg.chart .grid{stroke:var(--line)}
@media (prefers-color-scheme:dark){svg.chart .series{filter:brightness(2.2)}}
.skip{position:absolute;left:-999px}.skip:focus{left:8px;top:8px;background:var(--panel);padding:6px 10px;z-index:9}
.top{display:flex;flex-wrap:wrap;gap:8px 16px;align-items:center;padding:10px 16px;background:var(--panel);border-bottom:1px solid var(--line)}
.brand{font-weight:700;text-decoration:none;color:var(--fg)}
.top nav ul{display:flex;flex-wrap:wrap;gap:4px;list-style:none;margin:0;padding:0}
.top nav a{display:block;padding:6px 10px;border-radius:6px;text-decoration:none;color:var(--fg)}
.top nav a[aria-current=page]{background:var(--chip);font-weight:600;text-decoration:underline;text-underline-offset:4px}
.top .end{margin-left:auto;display:flex;flex-wrap:wrap;gap:8px;align-items:center}
main{max-width:1240px;margin:0 auto;padding:16px}
h1{font-size:1.4rem;margin:.2rem 0 1rem}h2{font-size:1.1rem;margin:1.4rem 0 .6rem}h3{font-size:1rem;margin:1rem 0 .4rem}
.muted{color:var(--muted)}.small{font-size:.87rem}
.grid{display:grid;gap:12px;grid-template-columns:repeat(auto-fit,minmax(260px,1fr))}
.card{background:var(--panel);border:1px solid var(--line);border-radius:8px;padding:12px 14px}
.card h2{margin-top:0}
.kv{display:grid;grid-template-columns:max-content 1fr;gap:4px 14px;margin:0}.kv dt{color:var(--muted)}.kv dd{margin:0;overflow-wrap:anywhere}
.counts{list-style:none;margin:0;padding:0}.counts li{display:flex;justify-content:space-between;gap:8px;padding:3px 0;border-bottom:1px dashed var(--line)}
.counts li:last-child{border-bottom:0}.counts .n{font-variant-numeric:tabular-nums;font-weight:600}
.table{overflow-x:auto;max-width:100%;background:var(--panel);border:1px solid var(--line);border-radius:8px;
background-image:linear-gradient(to right,var(--panel) 30%,transparent),linear-gradient(to left,var(--panel) 30%,transparent),
linear-gradient(to right,rgba(0,0,0,.18),transparent),linear-gradient(to left,rgba(0,0,0,.18),transparent);
background-position:left center,right center,left center,right center;background-repeat:no-repeat;
background-size:28px 100%,28px 100%,10px 100%,10px 100%;background-attachment:local,local,scroll,scroll}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:7px 10px;border-bottom:1px solid var(--line);vertical-align:top}
th{font-size:.85rem;color:var(--muted);font-weight:600;white-space:nowrap}tr:last-child td{border-bottom:0}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.88em;overflow-wrap:anywhere}
code.label{display:inline-block;margin:0 .3em .15em 0;padding:0 .3em;border:1px solid var(--muted);border-radius:3px}
.badge{display:inline-flex;align-items:center;gap:4px;padding:1px 8px;border-radius:999px;border:1px solid currentColor;font-size:.85rem;white-space:nowrap}
.icon{flex:none;vertical-align:-2px}
.brand .icon{width:18px;height:18px;vertical-align:-3px}
.chips{list-style:none;margin:4px 0 0;padding:0;display:flex;flex-wrap:wrap;gap:4px}
.chips a{text-decoration:none}
ul.plain{list-style:none;margin:0;padding:0}ul.plain li{padding:2px 0}
dl.details{display:grid;grid-template-columns:max-content minmax(0,1fr);gap:0 8px;margin:0;font-size:.87rem}
dl.details dt{color:var(--muted)}dl.details dd{margin:0;overflow-wrap:anywhere}
.fresh{text-decoration:underline dotted;text-underline-offset:3px;cursor:help}
.versions div{white-space:nowrap}
.card.error{max-width:720px;margin:6vh auto}
.t-ok{color:var(--ok)}.t-warn{color:var(--warn)}.t-bad{color:var(--bad)}.t-info{color:var(--info)}.t-idle{color:var(--idle)}
.t-bad{border-style:double;border-width:3px}.t-warn{border-style:dashed}
form.inline{display:inline}
.filters{display:flex;flex-wrap:wrap;gap:8px 12px;align-items:flex-end;margin:0 0 12px;background:var(--panel);border:1px solid var(--line);border-radius:8px;padding:10px}
label{display:flex;flex-direction:column;gap:2px;font-size:.85rem;color:var(--muted)}
label.check{flex-direction:row;align-items:center;gap:6px;color:var(--fg)}
input,select,button{font:inherit;color:var(--fg);background:var(--panel);border:1px solid var(--line);border-radius:6px;padding:5px 8px;min-height:34px}
input[type=checkbox]{min-height:0}
button,.button{cursor:pointer;background:var(--chip);font-weight:600;text-decoration:none;display:inline-block;color:var(--fg);border:1px solid var(--line);border-radius:6px;padding:5px 10px}
button.danger{color:var(--bad);border-color:var(--bad)}button.primary{background:var(--accent);color:var(--panel);border-color:var(--accent)}
.actions{display:flex;flex-wrap:wrap;gap:10px;align-items:flex-end;margin:8px 0}
.actions form{display:flex;flex-wrap:wrap;gap:6px;align-items:flex-end;background:var(--panel);border:1px solid var(--line);border-radius:8px;padding:8px}
.flash{padding:10px 12px;border-radius:8px;border:1px solid var(--line);background:var(--panel);margin-bottom:12px}
.flash.ok{border-left:6px solid var(--ok)}.flash.bad{border-left:6px solid var(--bad)}
.secret{display:block;padding:8px;background:var(--chip);border-radius:6px;user-select:all}
progress{width:100%;height:12px;accent-color:var(--accent)}
progress.p-bad{accent-color:var(--bad)}progress.p-ok{accent-color:var(--ok)}progress.p-warn{accent-color:var(--warn)}
.bars{display:grid;grid-template-columns:max-content 1fr max-content;gap:4px 10px;align-items:center}
.pager{display:flex;gap:10px;margin:10px 0}
.live{font-size:.85rem;padding:2px 8px;border-radius:999px;border:1px solid var(--line)}
.live.on{color:var(--ok);border-color:var(--ok)}.live.off{color:var(--bad);border-color:var(--bad);border-style:dashed}
.signin{max-width:420px;margin:10vh auto}.signin form{display:flex;flex-direction:column;gap:10px}
ol.queue{margin:0;padding-left:1.4rem}
ul.blocked{margin:4px 0 0;padding-left:1.2rem}ul.blocked li{margin:2px 0}
.card.notice{border-left:4px solid var(--warn);margin-bottom:12px}
main>*{min-width:0}
@media (max-width:600px){main{padding:10px}th,td{padding:6px}.top{padding:8px 10px}.hide-narrow{display:none}
.grid{grid-template-columns:minmax(0,1fr)}.filters input{max-width:100%}}
`;
