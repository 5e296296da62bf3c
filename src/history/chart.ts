/**
 * A line chart as an SVG string, drawn by the server (pure: no DOM, no script). Accessible: the
 * SVG is an image named by its <title> and described by its <desc> (what each series ends at),
 * both axes labelled, each series told apart by its dash as well as its colour, a legend in text.
 * The console's one chart module: the history pages and a rollout's analysis (thresholds as dashed
 * lines, failing samples marked) draw with it.
 */

interface ChartPoint {
  x: number;
  /** null: no value here, a gap in the line */
  y: number | null;
  /** a failing sample: drawn as a red ring whatever the series' colour, and counted in the description */
  bad?: boolean;
}

export interface ChartSeries {
  name: string;
  points: ChartPoint[];
  /** a CSS colour; by default the next of the palette */
  color?: string;
  /** drawn as a dashed horizontal line of the series' colour, named in the legend */
  threshold?: number | null;
}

export interface ChartOptions {
  title: string;
  /** prepended to the generated description of the series' last values */
  description?: string;
  xLabel: string;
  yLabel: string;
  width?: number;
  height?: number;
  /** each value holds until the next point (a rollup's series), drawn as steps up to xMax */
  step?: boolean;
  xMin?: number;
  xMax?: number;
  yMin?: number;
  yMax?: number;
  formatX?: (x: number) => string;
  formatY?: (y: number) => string;
  /** the prefix of the ids <title> and <desc> get, unique in the page */
  id?: string;
  /** a dot at every point (few samples, each one meaningful), not only at failing ones */
  dots?: boolean;
}

/** Failing samples are this red (4.8:1 on white), as a ring so they read without colour too. */
const BAD = "#c0262d";

/** Colours that keep 3:1 against white and stay apart for the common colour-blindnesses (Okabe–Ito, darkened). */
const PALETTE = ["#0b6e4f", "#b35900", "#1f5fa8", "#a3316f", "#6b5b00", "#5a3e9b", "#006d77", "#8a3b12"];
const DASHES = ["", "6 3", "2 3", "8 3 2 3", "1 2", "10 4", "4 2 1 2", "3 3"];

/** Text for SVG: markup escaped, and control characters (a host's version string) drawn as their symbols. */
export function svgText(s: string): string {
  return (
    s
      // eslint-disable-next-line no-control-regex -- control characters are exactly what is replaced
      .replace(/[\u0000-\u001f]/g, (c) => String.fromCharCode(0x2400 + c.charCodeAt(0)))
      .replace(/\u007f/g, "\u2421")
      .replace(/&/g, "&amp;")
      .replace(/</g, "&lt;")
      .replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;")
      .replace(/'/g, "&#39;")
  );
}

const round = (n: number) => Math.round(n * 10) / 10;

/** Ticks at 1, 2 or 5 times a power of ten, about `count` of them, from lo to at least hi. */
export function niceTicks(lo: number, hi: number, count = 4): number[] {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw)!;
  const ticks: number[] = [];
  // Up to the first tick at or above `hi`, so the top line is above every point.
  const top = Math.ceil(hi / step - 1e-9) * step;
  for (let t = Math.ceil(lo / step) * step; t <= top + step * 1e-9; t += step) ticks.push(Number(t.toPrecision(12)));
  return ticks;
}

export function renderLineChart(series: ChartSeries[], opts: ChartOptions): string {
  const width = opts.width ?? 640;
  const height = opts.height ?? 240;
  const id = opts.id ?? "chart";
  const fx = opts.formatX ?? ((x: number) => String(x));
  const fy = opts.formatY ?? ((y: number) => String(y));
  const pad = { left: 56, right: 16, top: 16, bottom: 44 };
  const legendRows = Math.ceil(series.length / 3);
  const legendH = legendRows * 18;
  const plotW = width - pad.left - pad.right;
  const plotH = height - pad.top - pad.bottom;
  const all = series.flatMap((s) => s.points.filter((p): p is ChartPoint & { y: number } => p.y !== null));
  const thresholds = series.flatMap((s) => (s.threshold != null ? [s.threshold] : []));
  const xMin = opts.xMin ?? Math.min(...all.map((p) => p.x), Infinity);
  const xMax = opts.xMax ?? Math.max(...all.map((p) => p.x), -Infinity);
  const yMin = opts.yMin ?? Math.min(0, ...all.map((p) => p.y), ...thresholds);
  const dataMax = Math.max(yMin, ...all.map((p) => p.y), ...thresholds);
  const yTicks = niceTicks(yMin, opts.yMax ?? (dataMax > yMin ? dataMax : yMin + 1));
  const yMax = opts.yMax ?? Math.max(yTicks[yTicks.length - 1], dataMax);
  const hasX = Number.isFinite(xMin) && Number.isFinite(xMax);
  const xSpan = hasX && xMax > xMin ? xMax - xMin : 1;
  const sx = (x: number) => round(pad.left + ((x - (hasX ? xMin : 0)) / xSpan) * plotW);
  const sy = (y: number) => round(pad.top + plotH - ((y - yMin) / (yMax - yMin || 1)) * plotH);

  const ends = series
    .map((s) => ({ s, last: s.points.filter((p) => p.y !== null).at(-1) }))
    .filter(({ last }) => last !== undefined)
    .map(({ s, last }) => `${s.name}: ${fy(last!.y!)}${s.threshold != null ? ` (threshold ${fy(s.threshold)})` : ""}`)
    .join("; ");
  const failing = all.filter((p) => p.bad).length;
  const desc = [
    opts.description,
    all.length === 0
      ? "No data in this window yet."
      : `${opts.yLabel} by ${opts.xLabel}, from ${fx(xMin)} to ${fx(xMax)}. Last values: ${ends}.`,
    failing ? `${failing} failing sample${failing === 1 ? "" : "s"}, ringed in red.` : "",
  ]
    .filter(Boolean)
    .join(" ");

  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" viewBox="0 0 ${width} ${height + legendH}" width="100%" aria-labelledby="${id}-title ${id}-desc">`,
    `<title id="${id}-title">${svgText(opts.title)}</title>`,
    `<desc id="${id}-desc">${svgText(desc)}</desc>`,
  );
  // Grid and y axis.
  for (const t of yTicks) {
    const y = sy(t);
    out.push(
      `<line class="grid" x1="${pad.left}" x2="${pad.left + plotW}" y1="${y}" y2="${y}" stroke="#d0d4d9" stroke-width="1"/>`,
      `<text x="${pad.left - 6}" y="${y + 4}" text-anchor="end" font-size="11" fill="currentColor">${svgText(fy(t))}</text>`,
    );
  }
  // x axis: five labelled ticks over the window.
  out.push(
    `<line x1="${pad.left}" x2="${pad.left + plotW}" y1="${pad.top + plotH}" y2="${pad.top + plotH}" stroke="currentColor" stroke-width="1"/>`,
  );
  if (hasX)
    for (let i = 0; i <= 4; i++) {
      const x = xMin + ((xMax - xMin) * i) / 4;
      const anchor = i === 0 ? "start" : i === 4 ? "end" : "middle";
      out.push(
        `<line x1="${sx(x)}" x2="${sx(x)}" y1="${pad.top + plotH}" y2="${pad.top + plotH + 4}" stroke="currentColor"/>`,
        `<text x="${sx(x)}" y="${pad.top + plotH + 16}" text-anchor="${anchor}" font-size="11" fill="currentColor">${svgText(fx(x))}</text>`,
      );
    }
  // Axis labels.
  out.push(
    `<text x="${pad.left + plotW / 2}" y="${pad.top + plotH + 34}" text-anchor="middle" font-size="12" fill="currentColor">${svgText(opts.xLabel)}</text>`,
    `<text x="14" y="${pad.top + plotH / 2}" text-anchor="middle" font-size="12" fill="currentColor" transform="rotate(-90 14 ${pad.top + plotH / 2})">${svgText(opts.yLabel)}</text>`,
  );
  if (all.length === 0)
    out.push(
      `<text x="${pad.left + plotW / 2}" y="${pad.top + plotH / 2}" text-anchor="middle" font-size="13" fill="currentColor">No data yet</text>`,
    );
  // Thresholds, then series: a line per run of values (a gap splits it), dots where asked or failing.
  series.forEach((s, i) => {
    if (s.threshold == null || all.length === 0) return;
    const color = s.color ?? PALETTE[i % PALETTE.length];
    const y = sy(s.threshold);
    out.push(
      `<line class="threshold" x1="${pad.left}" x2="${pad.left + plotW}" y1="${y}" y2="${y}" stroke="${svgText(color)}" stroke-width="1" stroke-dasharray="4 3"><title>${svgText(`${s.name}: threshold ${fy(s.threshold)}`)}</title></line>`,
    );
  });
  series.forEach((s, i) => {
    if (s.points.length === 0) return;
    const color = s.color ?? PALETTE[i % PALETTE.length];
    const dash = DASHES[i % DASHES.length];
    const pts = [...s.points].sort((a, b) => a.x - b.x);
    const runs: { x: number; y: number }[][] = [[]];
    for (const p of pts) {
      if (p.y === null) runs.push([]);
      else runs[runs.length - 1].push({ x: p.x, y: p.y });
    }
    for (const run of runs.filter((r) => r.length > 0)) {
      const coords: string[] = [];
      run.forEach((p, j) => {
        if (opts.step && j > 0) coords.push(`${sx(p.x)},${sy(run[j - 1].y)}`);
        coords.push(`${sx(p.x)},${sy(p.y)}`);
      });
      const last = run[run.length - 1];
      if (opts.step && hasX && run === runs[runs.length - 1] && last.x < xMax) coords.push(`${sx(xMax)},${sy(last.y)}`);
      out.push(
        `<polyline class="series" fill="none" stroke="${svgText(color)}" stroke-width="2"${dash ? ` stroke-dasharray="${dash}"` : ""} points="${coords.join(" ")}"><title>${svgText(s.name)}</title></polyline>`,
      );
    }
    for (const p of pts) {
      if (p.y === null || !(opts.dots || p.bad)) continue;
      const label = `${s.name}: ${fy(p.y)} at ${fx(p.x)}${p.bad ? " (failing)" : ""}`;
      out.push(
        p.bad
          ? `<circle class="bad" cx="${sx(p.x)}" cy="${sy(p.y)}" r="4" fill="${BAD}" stroke="${BAD}" stroke-width="2"><title>${svgText(label)}</title></circle>`
          : `<circle cx="${sx(p.x)}" cy="${sy(p.y)}" r="3" fill="${svgText(color)}"><title>${svgText(label)}</title></circle>`,
      );
    }
  });
  // Legend: three to a row under the plot.
  series.forEach((s, i) => {
    const color = s.color ?? PALETTE[i % PALETTE.length];
    const dash = DASHES[i % DASHES.length];
    const x = pad.left + (i % 3) * Math.floor(plotW / 3);
    const y = height + Math.floor(i / 3) * 18 + 4;
    out.push(
      `<line class="series" x1="${x}" x2="${x + 22}" y1="${y}" y2="${y}" stroke="${svgText(color)}" stroke-width="2"${dash ? ` stroke-dasharray="${dash}"` : ""}/>`,
      `<text x="${x + 28}" y="${y + 4}" font-size="12" fill="currentColor">${svgText(s.name + (s.threshold != null ? ` (threshold ${fy(s.threshold)})` : ""))}</text>`,
    );
  });
  out.push("</svg>");
  return out.join("");
}
