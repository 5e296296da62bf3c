/**
 * The history's pure parts: the SVG line chart (an accessible image whose text cannot break out of
 * its markup), its ticks, the versions' bound, and CSV cells a spreadsheet will not run.
 */
import { describe, expect, it } from "vitest";
import { niceTicks, renderLineChart, svgText } from "../src/history/chart";
import { agentVersions } from "../src/history/rollup";
import { csvCell } from "../src/history/shape";

describe("renderLineChart", () => {
  const series = [
    {
      name: "realized",
      points: [
        { x: 0, y: 2 },
        { x: 50, y: 5 },
      ],
    },
    { name: "<b>1.0\x1b[31m</b>", points: [{ x: 0, y: 1 }] },
  ];
  const svg = renderLineChart(series, {
    id: "c1",
    title: "Servers & more",
    xLabel: "time (UTC)",
    yLabel: "servers",
    step: true,
    xMin: 0,
    xMax: 100,
  });

  it("is an image named by its title and described by its desc, with both axes labelled", () => {
    // The opening tag's attributes, each once: a second role (or label) would leave which one counts to the parser.
    const open = /^<svg ([^>]*)>/.exec(svg)![1];
    const attrs = [...open.matchAll(/([\w:-]+)="([^"]*)"/g)].map((m) => [m[1], m[2]] as const);
    expect(new Set(attrs.map(([k]) => k)).size).toBe(attrs.length);
    const attr = Object.fromEntries(attrs);
    expect(attr.role).toBe("img");
    expect(attr["aria-labelledby"]).toBe("c1-title c1-desc");
    // Each id it names is on exactly one element of the chart.
    for (const id of attr["aria-labelledby"].split(" ")) expect(svg.split(`id="${id}"`).length - 1).toBe(1);
    expect(svg).toContain('<title id="c1-title">Servers &amp; more</title>');
    expect(svg).toMatch(
      /<desc id="c1-desc">servers by time \(UTC\), from 0 to 100\. Last values: realized: 5; .*<\/desc>/,
    );
    expect(svg).toContain(">time (UTC)</text>");
    expect(svg).toContain(">servers</text>");
  });

  it("escapes series names and draws their control characters as symbols", () => {
    expect(svg).not.toContain("<b>");
    expect(svg).not.toContain("\x1b");
    expect(svg).toContain("&lt;b&gt;1.0\u241b[31m&lt;/b&gt;");
  });

  it("draws steps that hold each value until the next point and to the end of the window", () => {
    // x 0 → 56 px, 50 → 340 px, 100 → 624 px (640 wide, 56 and 16 padding).
    const line = /<polyline[^>]*points="([^"]+)"/.exec(svg)![1].split(" ");
    expect(line).toHaveLength(4);
    expect(line[1].split(",")[0]).toBe("340");
    expect(line[1].split(",")[1]).toBe(line[0].split(",")[1]);
    expect(line[3].split(",")[0]).toBe("624");
  });

  it("says there is no data rather than drawing an empty frame silently", () => {
    const empty = renderLineChart([], { title: "t", xLabel: "x", yLabel: "y" });
    expect(empty).toContain("No data yet");
    expect(empty).toContain("No data in this window yet.");
  });
});

describe("history helpers", () => {
  it("ticks at 1, 2 or 5 times a power of ten", () => {
    expect(niceTicks(0, 5)).toEqual([0, 2, 4, 6]);
    expect(niceTicks(0, 100)).toEqual([0, 50, 100]);
    expect(niceTicks(0, 0)).toEqual([0]);
  });

  it("keeps eight versions of an agent; past that, seven and the rest as other", () => {
    const rows = Array.from({ length: 10 }, (_, i) => ({ version: `v${i}`, n: 10 - i }));
    const v = agentVersions([...rows, { version: null, n: 3 }]);
    expect(Object.keys(v.versions)).toEqual(["v0", "v1", "v2", "v3", "v4", "v5", "v6"]);
    expect(v.other).toBe(3 + 2 + 1);
    expect(v.none).toBe(3);
    expect(Object.keys(agentVersions(rows.slice(0, 8)).versions)).toHaveLength(8);
  });

  it("quotes CSV cells and defuses formulas", () => {
    expect(csvCell("a,b")).toBe('"a,b"');
    expect(csvCell("=1+1")).toBe("'=1+1");
    expect(csvCell('@x"y')).toBe(`"'@x""y"`);
    expect(csvCell(-3)).toBe("-3");
    expect(svgText("'")).toBe("&#39;");
  });
});
