/**
 * Line charts drawn by the server as SVG text (no script on the page, nothing fetched): a series
 * per line over time, with an optional dashed threshold per series. Pure; every text is escaped.
 */

interface ChartPoint {
  /** ms since the epoch */
  at: number;
  value: number | null;
  /** A point drawn as failing (a red dot). */
  bad?: boolean;
}

export interface ChartSeries {
  name: string;
  points: ChartPoint[];
  threshold?: number | null;
}

export interface ChartOptions {
  /** What the chart shows, for screen readers (its <title>). */
  title: string;
  width?: number;
  height?: number;
}

const COLOURS = ["#2563eb", "#9333ea", "#0d9488", "#c2410c", "#4d7c0f", "#be185d"];

const esc = (s: string) =>
  s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;").replace(/'/g, "&#39;");

const num = (n: number) => (Number.isInteger(n) ? String(n) : n.toFixed(2));
const clock = (ms: number) => new Date(ms).toISOString().slice(11, 19);

/**
 * One SVG: the series' lines and dots over a shared time axis, each threshold a dashed line of
 * its series' colour, a legend under the plot. Points without a value are gaps.
 */
export function renderLineChart(series: ChartSeries[], opts: ChartOptions): string {
  const width = opts.width ?? 640;
  const height = opts.height ?? 220;
  const pad = { left: 48, right: 12, top: 12 };
  const plotW = width - pad.left - pad.right;
  // The plot, its time labels under it, then one legend line per series.
  const plotH = height - pad.top - 28;
  const totalH = pad.top + plotH + 28 + 16 * series.length;
  const times = series.flatMap((s) => s.points.map((p) => p.at));
  const values = series.flatMap((s) => [
    ...s.points.flatMap((p) => (p.value === null ? [] : [p.value])),
    ...(s.threshold != null ? [s.threshold] : []),
  ]);
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${width} ${totalH}" width="${width}" height="${totalH}" role="img" class="chart">`,
    `<title>${esc(opts.title)}</title>`,
  ];
  if (times.length === 0 || values.length === 0) {
    out.push(`<text x="${width / 2}" y="${totalH / 2}" text-anchor="middle" class="muted">no samples yet</text></svg>`);
    return out.join("");
  }
  let t0 = Math.min(...times);
  let t1 = Math.max(...times);
  if (t0 === t1) [t0, t1] = [t0 - 1000, t1 + 1000];
  let v0 = Math.min(0, ...values);
  let v1 = Math.max(...values);
  if (v0 === v1) v1 = v0 + 1;
  const span = v1 - v0;
  v1 += span * 0.05;
  const x = (at: number) => pad.left + ((at - t0) / (t1 - t0)) * plotW;
  const y = (v: number) => pad.top + plotH - ((v - v0) / (v1 - v0)) * plotH;
  // Axes, with the range's ends and the time span.
  out.push(
    `<line x1="${pad.left}" y1="${pad.top}" x2="${pad.left}" y2="${pad.top + plotH}" stroke="currentColor" stroke-opacity="0.4"/>`,
    `<line x1="${pad.left}" y1="${pad.top + plotH}" x2="${pad.left + plotW}" y2="${pad.top + plotH}" stroke="currentColor" stroke-opacity="0.4"/>`,
    `<text x="${pad.left - 4}" y="${pad.top + 10}" text-anchor="end" font-size="11">${esc(num(v1))}</text>`,
    `<text x="${pad.left - 4}" y="${pad.top + plotH}" text-anchor="end" font-size="11">${esc(num(v0))}</text>`,
    `<text x="${pad.left}" y="${pad.top + plotH + 14}" font-size="11">${clock(t0)}</text>`,
    `<text x="${pad.left + plotW}" y="${pad.top + plotH + 14}" text-anchor="end" font-size="11">${clock(t1)} UTC</text>`,
  );
  series.forEach((s, i) => {
    const colour = COLOURS[i % COLOURS.length];
    if (s.threshold != null) {
      out.push(
        `<line x1="${pad.left}" x2="${pad.left + plotW}" y1="${y(s.threshold).toFixed(1)}" y2="${y(s.threshold).toFixed(1)}" stroke="${colour}" stroke-dasharray="4 3" stroke-opacity="0.7"><title>${esc(`${s.name}: threshold ${num(s.threshold)}`)}</title></line>`,
      );
    }
    // A gap (no value) splits the line.
    let run: string[] = [];
    const flush = () => {
      if (run.length > 1)
        out.push(`<polyline fill="none" stroke="${colour}" stroke-width="2" points="${run.join(" ")}"/>`);
      run = [];
    };
    for (const p of s.points) {
      if (p.value === null) {
        flush();
        continue;
      }
      run.push(`${x(p.at).toFixed(1)},${y(p.value).toFixed(1)}`);
    }
    flush();
    for (const p of s.points) {
      if (p.value === null) continue;
      out.push(
        `<circle cx="${x(p.at).toFixed(1)}" cy="${y(p.value).toFixed(1)}" r="3" fill="${p.bad ? "#dc2626" : colour}"><title>${esc(`${s.name}: ${num(p.value)} at ${clock(p.at)}`)}</title></circle>`,
      );
    }
    const ly = pad.top + plotH + 34 + 16 * i;
    out.push(
      `<rect x="${pad.left}" y="${ly - 9}" width="10" height="10" fill="${colour}"/>`,
      `<text x="${pad.left + 16}" y="${ly}" font-size="12">${esc(s.name)}${s.threshold != null ? esc(` (threshold ${num(s.threshold)})`) : ""}</text>`,
    );
  });
  out.push("</svg>");
  return out.join("");
}
