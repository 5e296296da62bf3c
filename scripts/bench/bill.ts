// The bill of `npm run bench -- cost` (./scenarios/cost.ts): the local meter's readings
// (src/local/meter.ts) turned into usage per host-month, priced at ./prices.ts, itemized per
// transport and compared side by side with the bill measured before the host channel.
import type { SimSummary } from "../../sim/simulator.ts";
import type { CpuCalibration } from "./cpu.ts";
import type { BenchContext } from "./run.ts";
import { deployedLogging, describeLogging, type Logging } from "./logging.ts";
import {
  cronLinesPerRun,
  ITEMS,
  logEventsOf,
  monthOf,
  usageOf,
  zeroItems,
  type ClassReading,
  type Item,
  type Usage,
  type Window,
} from "./month.ts";
import { PRICES, PRICES_READ_ON, STORED_GB, type Price } from "./prices.ts";

export type { Reading, Usage, Window } from "./month.ts";

const FLEETS = [1_000, 10_000, 100_000];

const LABEL: Record<Item, string> = {
  workerRequests: "Worker requests",
  workerCpuMs: "Worker CPU ms (estimate)",
  doRequests: "DO requests",
  doGbSeconds: "DO duration, GB-s",
  d1RowsRead: "D1 rows read",
  d1RowsWritten: "D1 rows written",
  doRowsRead: "DO storage rows read",
  doRowsWritten: "DO storage rows written (each setAlarm one)",
  doStoredGbMonth: "DO stored GB-month",
  d1StoredGbMonth: "D1 stored GB-month",
  logEvents: "Workers Logs events",
};

const DEPLOYED = deployedLogging();
const charge = (p: Price, used: number) => Math.max(0, used - p.includedPerMonth) * p.usdPerUnit;

const si = (n: number) =>
  n >= 1e9
    ? `${(n / 1e9).toFixed(2)}G`
    : n >= 1e6
      ? `${(n / 1e6).toFixed(2)}M`
      : n >= 1e4
        ? `${(n / 1e3).toFixed(1)}k`
        : n > 0 && n < 0.01
          ? n.toPrecision(3)
          : n.toFixed(n < 10 ? 2 : 0);
const usd = (n: number) => `$${n < 1 ? n.toFixed(4) : n.toFixed(2)}`;

/** What one transport's run comes to, for the side-by-side comparison. */
export interface TransportBill {
  transport: string;
  label: string;
  monthly: Record<Item, number>;
  /** Per deployment, whatever the number of hosts (the cron). */
  fixed: Record<Item, number>;
  totals: number[];
  /** Share of the steady window each server's ledger was awake (an idle host's). */
  ledgerAwake: number | null;
  push: { p50: number | null; p99: number | null } | null;
  /** Workers Logs' share of the month's bill at each fleet size, as deployed. */
  logShares?: number[];
}

/**
 * The bill measured before the host channel (the long poll parked in the server's ledger), per
 * host-month: `npm run bench -- cost --transport http` on the code of the meter's merge (150 hosts,
 * real time, 2026-11-24; docs/benchmarks.md). The in-object park it measured no longer exists.
 */
const BEFORE: TransportBill = {
  transport: "before",
  label: "long poll parked in the ledger (measured before the channel)",
  // Measured while the bill still scaled the cron with the hosts (288 of these 195.3k Worker
  // requests per host-month): nothing beside its DO duration.
  // DO storage rows, stored data and logs were not metered then (0 here).
  monthly: {
    ...zeroItems(),
    workerRequests: 195.3e3,
    workerCpuMs: 488.6e3,
    doRequests: 200.7e3,
    doGbSeconds: 322.3e3,
    d1RowsRead: 53.6e3,
    d1RowsWritten: 281.0e3,
  },
  fixed: zeroItems(),
  totals: [],
  ledgerAwake: 0.97,
  push: null,
};

/** Other logging settings than the deployed one, to price in each bill: what turning more on costs. */
const LOGGING_CHOICES: { label: string; logging: Logging }[] = [
  { label: "as deployed", logging: DEPLOYED },
  { label: 'ACCESS_LOG "on" (a line per request)', logging: { ...DEPLOYED, enabled: true, accessLog: "on" } },
  {
    label: "invocation logs on (an execution log per invocation)",
    logging: { ...DEPLOYED, enabled: true, invocationLogs: true },
  },
  {
    label: "both, sampled at 0.01",
    logging: { enabled: true, accessLog: "on", invocationLogs: true, headSamplingRate: 0.01 },
  },
  {
    label: "both, head_sampling_rate 1 (the shipped default before)",
    logging: { enabled: true, accessLog: "on", invocationLogs: true, headSamplingRate: 1 },
  },
];

/** The month's bill for each fleet size: what lies beyond the plan's included amounts, plus the plan. */
function totalsOf(monthly: Record<Item, number>, fixed: Record<Item, number>) {
  return FLEETS.map((n) =>
    ITEMS.reduce<number>(
      (t, item) => t + charge(PRICES[item], monthly[item] * n + fixed[item]),
      PRICES.planUsdPerMonth,
    ),
  );
}

export function report(
  ctx: BenchContext,
  r: {
    transport: string;
    label: string;
    hosts: number;
    rounds: number;
    windows: Window[];
    events: string[];
    summary: SimSummary;
    periodic?: { usage: Partial<Usage>; why: string };
    /** Bytes stored per host at the end of the run, less what was stored before it. */
    stored: { doBytes: number; d1Bytes: number };
    /** The Worker's CPU per request, calibrated (./cpu.ts): replaces the window's estimate. */
    cpu?: CpuCalibration | null;
  },
): TransportBill {
  const w = Object.fromEntries(r.windows.map((x) => [x.name, x])) as Record<
    "setup" | "join" | "events" | "steady",
    Window
  >;
  const { steady, perHostMonth, perHostRound, monthly, fixed } = monthOf({
    events: w.events,
    steady: w.steady,
    hosts: r.hosts,
    rounds: r.rounds,
    periodic: r.periodic?.usage,
    logging: DEPLOYED,
  });
  monthly.doStoredGbMonth = r.stored.doBytes / STORED_GB;
  monthly.d1StoredGbMonth = r.stored.d1Bytes / STORED_GB;
  if (r.cpu) monthly.workerCpuMs = monthly.workerRequests * r.cpu.perRequestMs;
  const log = (line = "") => console.log(line);
  const { latency_ms: lat } = r.summary;

  log(`\n## Cost of ${r.hosts} hosts, transport \`${r.transport}\` (${r.label})\n`);
  log(
    `Prices: Workers Paid plan list prices read on ${PRICES_READ_ON} (scripts/bench/prices.ts). Measured ${new Date().toISOString().slice(0, 10)}.`,
  );
  log(
    `Windows (real time): ${r.windows.map((x) => `${x.name} ${x.s.toFixed(0)} s`).join(", ")}. Events: ${r.events.join("; ")}.`,
  );
  log(
    `Simulator: ${r.summary.ops.polls} polls, ${r.summary.ops.pushes} pushes, ${r.summary.ops.reports} reports, ${r.summary.ops.fleetlock} FleetLock calls, ${r.summary.ops.errors} errors; channel sockets opened ${r.summary.channel.opened}, closed or refused ${r.summary.channel.closed}; last status ${JSON.stringify(r.summary.byStatus)}.`,
  );
  if (lat.push_p50 !== null)
    log(
      `A desired change reached its connected host (from the operator's write) in p50 ${lat.push_p50} ms, p99 ${lat.push_p99} ms; realized in p50 ${lat.converge_p50} ms, p99 ${lat.converge_p99} ms.`,
    );
  log(
    `Month: the steady window's rate over 30 days plus ${r.rounds} rounds of the events window (less the steady rate over its length)${r.periodic ? `, plus ${r.periodic.why}` : ""}. Fleets scale the per-host figures; the cron (once a minute: ${si(fixed.workerRequests)} runs, ${si(fixed.workerCpuMs)} CPU ms by the estimate, ${si(fixed.d1RowsRead)} D1 rows read and ${si(fixed.d1RowsWritten)} written at the steady window's rate per run) is billed once per deployment; the bill is what lies beyond the plan's included amounts, plus the plan's $${PRICES.planUsdPerMonth}.\n`,
  );

  if (r.cpu)
    log(
      `Worker CPU, calibrated (scripts/bench/cpu.ts): ${r.cpu.perRequestMs.toFixed(2)} ms per request, the median of ${r.cpu.bursts.map((b) => b.toFixed(2)).join(" / ")} ms (${r.cpu.requests}); the runtime's CPU for the whole request, ledger and local D1 included, so an upper bound on the Worker's. A poll answered at once (no wait): ${r.cpu.immediate.perRequestMs.toFixed(2)} ms (${r.cpu.immediate.bursts.map((b) => b.toFixed(2)).join(" / ")}). The window's estimate said ${(perHostMonth.workerCpuMs / Math.max(1, perHostMonth.workerRequests)).toFixed(2)} ms.\n`,
    );
  const head = ["item", "per host-month", ...FLEETS.map((n) => `${n.toLocaleString("en-US")} hosts`)];
  log(`| ${head.join(" | ")} |`);
  log(`|${head.map((_, i) => (i ? "---:" : "---")).join("|")}|`);
  for (const item of ITEMS) {
    const price = PRICES[item];
    const cells = FLEETS.map(
      (n) => `${si(monthly[item] * n + fixed[item])} → ${usd(charge(price, monthly[item] * n + fixed[item]))}`,
    );
    log(
      `| ${LABEL[item]} | ${si(monthly[item])} (${usd(monthly[item] * price.usdPerUnit)} at list) | ${cells.join(" | ")} |`,
    );
  }
  const totals = totalsOf(monthly, fixed);
  log(`| **total per month** (plan included) | | ${totals.map((t) => `**${usd(t)}**`).join(" | ")} |`);
  log(`| per host-month | | ${totals.map((t, i) => usd(t / FLEETS[i])).join(" | ")} |`);
  // The cron's runs log too, once per deployment: its invocation and its line(s) each run.
  const cronRun = { invocations: 1, accessLines: 0, writeLines: 0, otherLines: cronLinesPerRun(w.steady) };
  const logCost = (n: number, logging: Logging) =>
    charge(PRICES.logEvents, logEventsOf(monthly, logging) * n + fixed.workerRequests * logEventsOf(cronRun, logging));
  const logShares = FLEETS.map((n, i) => logCost(n, DEPLOYED) / totals[i]);
  const tail = FLEETS.map((n) =>
    usd(
      charge(PRICES.doGbSeconds, (perHostMonth.doGbSecondsTail + r.rounds * perHostRound.doGbSecondsTail) * n) -
        charge(PRICES.doGbSeconds, monthly.doGbSeconds * n),
    ),
  );
  log(`| DO duration if the 10 s idle before hibernation is billed too | | ${tail.map((t) => `+${t}`).join(" | ")} |`);

  log(
    `\nWorkers Logs (${describeLogging(DEPLOYED)}, as wrangler.toml deploys it): the month's log events and what they cost beyond the 20 million included, with the total bill they make; other settings priced the same way (docs/deploy.md says how to set them):\n`,
  );
  log(
    `| logging | events per host-month | ${FLEETS.map((n) => `${n.toLocaleString("en-US")} hosts: logs / bill (logs' share)`).join(" | ")} |`,
  );
  log(`|---|---:|${FLEETS.map(() => "---:").join("|")}|`);
  for (const { label, logging } of LOGGING_CHOICES) {
    const cells = FLEETS.map((n, i) => {
      const cost = logCost(n, logging);
      const bill = totals[i] - logCost(n, DEPLOYED) + cost;
      return `${usd(cost)} / ${usd(bill)} (${pct(cost / bill)})`;
    });
    log(`| ${label} | ${si(logEventsOf(monthly, logging))} | ${cells.join(" | ")} |`);
  }
  log(
    `\nPer host-month: ${si(monthly.invocations)} invocations (an execution log each where invocation logs are on), ${si(monthly.accessLines)} Worker requests of which ${si(monthly.writeLines)} writes (ACCESS_LOG "on" / "writes" lines), ${si(monthly.otherLines)} other lines (errors, warnings); ${si(monthly.alarmsSet)} setAlarm() calls among the DO rows written; stored per host: ${(r.stored.doBytes / 1024).toFixed(1)} KiB in objects, ${(r.stored.d1Bytes / 1024).toFixed(1)} KiB in D1.`,
  );

  log(`\nWhere it comes from (steady window, ${w.steady.s.toFixed(0)} s, ${r.hosts} hosts):\n`);
  log(
    "| source | requests | awake (share of its objects' time) | D1 rows read / written | busiest calls (count, total s) |",
  );
  log("|---|---:|---:|---:|---|");
  const s = w.steady.reading;
  log(`| Worker | ${s.worker.requests} | | ${s.worker.d1.rows_read} / ${s.worker.d1.rows_written} | |`);
  log(
    `| cron, once per deployment (${s.worker.scheduled} runs; the events window's: ${w.events.reading.worker.scheduled} runs, ${w.events.reading.worker.cron_d1.rows_read} / ${w.events.reading.worker.cron_d1.rows_written} rows) | ${s.worker.scheduled} | | ${s.worker.cron_d1.rows_read} / ${s.worker.cron_d1.rows_written} | |`,
  );
  const shareOf = (c: ClassReading) => (c.instances ? c.awake_ms / (c.instances * w.steady.s * 1000) : 0);
  for (const [name, c] of Object.entries(s.objects)) {
    const calls = Object.entries(c.methods)
      .sort((a, b) => b[1].ms - a[1].ms)
      .slice(0, 3)
      .map(([m, u]) => `${m} ${u.calls}, ${(u.ms / 1000).toFixed(1)} s`);
    log(
      `| ${name} (${c.instances} objects) | ${c.requests.toFixed(0)} | ${(c.awake_ms / 1000).toFixed(1)} s (${pct(shareOf(c))}) | ${c.d1.rows_read} / ${c.d1.rows_written} | ${calls.join("; ")} |`,
    );
  }
  const cpu = w.steady.cpuMs;
  log(
    `\nLocal runtime CPU in the steady window: ${cpu === null ? "not measured (no /proc)" : `${(cpu / 1000).toFixed(1)} s, of which ${(w.steady.idleCpuMs / 1000).toFixed(1)} s its idle rate`}; charged to the Worker: ${(steady.workerCpuMs / Math.max(1, steady.workerRequests)).toFixed(1)} ms per host request, ${(fixed.workerCpuMs / fixed.workerRequests).toFixed(1)} ms per cron run.`,
  );
  log(`One round of events, per host: ${ITEMS.map((i) => `${LABEL[i]} ${si(perHostRound[i])}`).join(", ")}.`);
  log(
    `Setup, per host (one-off): ${ITEMS.map((i) => `${LABEL[i]} ${si(usageOf(w.setup, DEPLOYED)[i] / r.hosts)}`).join(", ")}.`,
  );
  if (!s.d1_rows_metered)
    log("\nD1 rows were NOT metered (the D1 binding lacks the internal the meter taps): their lines read 0.");
  log(
    "Not metered: WebSocket attachments' storage; stored data is one round's (audit rows and finished rollouts accumulate beyond it).\n",
  );

  ctx.note(`cost (${r.transport}, ${r.hosts} hosts): per host-month at 10,000 hosts`, usd(totals[1] / FLEETS[1]));
  ctx.note(`cost (${r.transport}): DO GB-s per host-month`, si(monthly.doGbSeconds));
  const ledger = s.objects.ServerLedger;
  ctx.note(`cost (${r.transport}): Workers Logs' share of the bill at 10,000 hosts`, pct(logShares[1]));
  return {
    transport: r.transport,
    label: r.label,
    monthly,
    fixed,
    totals,
    logShares,
    ledgerAwake: ledger ? shareOf(ledger) : null,
    push: lat.push_p50 === null ? null : { p50: lat.push_p50, p99: lat.push_p99 },
  };
}

const pct = (x: number) => `${(x * 100).toFixed(x < 0.1 ? 2 : 0)}%`;

/** The transports side by side, with the bill measured before the channel. */
export function compare(bills: TransportBill[]) {
  const log = (line = "") => console.log(line);
  const rows = [{ ...BEFORE, totals: totalsOf(BEFORE.monthly, BEFORE.fixed) }, ...bills];
  log("\n## Side by side: the month's bill beyond the plan's included amounts (plan included)\n");
  log(
    `| transport | ${FLEETS.map((n) => `${n.toLocaleString("en-US")} hosts`).join(" | ")} | per host-month at 10,000 | logs' share at 10,000 / 100,000 | DO GB-s per host-month | ledger awake (steady) | push p50 / p99 |`,
  );
  log(`|---|${FLEETS.map(() => "---:").join("|")}|---:|---:|---:|---:|---:|`);
  for (const b of rows) {
    const push = b.push ? `${b.push.p50} / ${b.push.p99} ms` : "";
    const logs = b.logShares ? `${pct(b.logShares[1])} / ${pct(b.logShares[2])}` : "not metered";
    log(
      `| \`${b.transport}\`: ${b.label} | ${b.totals.map(usd).join(" | ")} | ${usd(b.totals[1] / FLEETS[1])} | ${logs} | ${si(b.monthly.doGbSeconds)} | ${b.ledgerAwake === null ? "" : pct(b.ledgerAwake)} | ${push} |`,
    );
  }
  log("\nItem by item, per host-month:\n");
  log(`| item | ${rows.map((b) => `\`${b.transport}\``).join(" | ")} |`);
  log(`|---|${rows.map(() => "---:").join("|")}|`);
  for (const item of ITEMS) log(`| ${LABEL[item]} | ${rows.map((b) => si(b.monthly[item])).join(" | ")} |`);
  log("");
}

/**
 * R2 operations per step of an image's life, as test/images-hosts.test.ts measures them with the
 * meter's R2 counts (src/local/r2-meter.ts): an upload is one CreateMultipartUpload, one
 * UploadPart per 50 MiB part and one CompleteMultipartUpload (Class A), and the completion's digest
 * check reads the object once (Class B); a host's download, whole or one Range, is one GetObject
 * (Class B) behind one Worker request that asks the server's ledger once (one DO request).
 */
const IMAGE_OPS = { partBytes: 50 * 1024 * 1024, classBPerDownload: 1, doRequestsPerDownload: 1 };

/** A rollout of one `mb` MB image to `hosts` hosts, each downloading it once; the image kept a month. */
export function imageRolloutBill(mb = 50, hosts = 10_000) {
  const log = (line = "") => console.log(line);
  const bytes = mb * 1e6;
  const parts = Math.ceil(bytes / IMAGE_OPS.partBytes);
  const items: [string, Price, number][] = [
    ["R2 Class A (upload: create, parts, complete)", PRICES.r2ClassA, 2 + parts],
    ["R2 Class B (digest check + one GetObject per host)", PRICES.r2ClassB, 1 + hosts * IMAGE_OPS.classBPerDownload],
    ["R2 storage, GB-month (kept a month)", PRICES.r2StorageGbMonth, bytes / 1e9],
    ["Worker requests (one per download)", PRICES.workerRequests, hosts],
    [
      "DO requests (the ledger checks the download is in its config)",
      PRICES.doRequests,
      hosts * IMAGE_OPS.doRequestsPerDownload,
    ],
  ];
  log(`\n## A rollout of a ${mb} MB image to ${hosts.toLocaleString("en-US")} hosts\n`);
  log(
    "Arithmetic from the operations measured per upload and per download (test/images-hosts.test.ts, the meter's R2 counts); R2 has no egress fee, so the " +
      `${((bytes * hosts) / 1e9).toFixed(0)} GB the hosts download cost nothing as bytes.\n`,
  );
  log("| item | count | at list price | beyond the free tier alone |");
  log("|---|---:|---:|---:|");
  let list = 0;
  for (const [label, price, n] of items) {
    list += n * price.usdPerUnit;
    log(`| ${label} | ${si(n)} | ${usd(n * price.usdPerUnit)} | ${usd(charge(price, n))} |`);
  }
  log(`| **total** | | **${usd(list)}** | |`);
  log("");
  return list;
}
