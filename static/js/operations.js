/* Operations history: draw every chart of the page with uPlot (static/vendor/uplot).
 *
 * The data come from <script type="application/json" id="operations-data"> (Django's
 * json_script): {window, time_zone, charts: [{id, kind, title, unit, step_minutes,
 * x: [epoch s], x_end, draw, lines: [{label, values: [number|null], latest}]}]}.
 * Each chart goes into its <div class="plot" data-chart="id">, as wide as that box,
 * and follows its width when the window or the phone turns. A null is a gap, never
 * a zero. A "steps" chart holds counts of buckets: each value is drawn flat over its
 * own bucket, from its x to the next (the last one to x_end), never as a slope
 * from the bucket before; "line" charts are sampled levels.
 */
(function () {
  "use strict";

  // The lines' colours, in this order; operations.css colours the legend's swatches.
  const PALETTE = ["#0f766e", "#f59e0b", "#6366f1", "#e11d48", "#0891b2", "#65a30d", "#a21caf", "#78716c"];
  const HEIGHT = 220;

  function cssVar(name, fallback) {
    const value = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
    return value || fallback;
  }

  function formatNumber(value) {
    if (value === null || value === undefined) return "—";
    if (Math.abs(value) >= 1000) return Math.round(value).toLocaleString();
    return String(Math.round(value * 100) / 100);
  }

  function yRange(chart) {
    if (chart.unit === "%") return () => [0, 100];
    // Counts, ages and depths start at zero; an all-zero line still gets an axis.
    return (u, min, max) => [0, max > 0 ? max * 1.1 : 1];
  }

  // A value between two gaps draws no line segment: it needs a dot to be seen.
  function hasIsolated(values) {
    return values.some(
      (value, i) => value !== null && (values[i - 1] ?? null) === null && (values[i + 1] ?? null) === null
    );
  }

  function options(chart, width, timeZone) {
    const axisColour = cssVar("--body-quiet-color", "#666");
    const gridColour = cssVar("--hairline-color", "#e5e5e5");
    const few = chart.x.length <= 30;
    const stepped = chart.draw === "steps";
    return {
      width: width,
      height: HEIGHT,
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), timeZone),
      scales: { x: { time: true }, y: { range: yRange(chart) } },
      axes: [
        { stroke: axisColour, grid: { stroke: gridColour, width: 1 }, ticks: { stroke: gridColour } },
        {
          stroke: axisColour,
          grid: { stroke: gridColour, width: 1 },
          ticks: { stroke: gridColour },
          size: 56,
          values: (u, splits) => splits.map(formatNumber),
        },
      ],
      // The legend is the page's own list under the chart (names, colours and the
      // newest values, rendered with the page): it takes its place before this
      // script runs, so drawing the chart moves nothing (operations.css has the
      // same palette, line by line).
      legend: { show: false },
      series: [
        { label: "time" },
        ...chart.lines.map((line, index) => ({
          label: line.label,
          stroke: PALETTE[index % PALETTE.length],
          width: 2,
          spanGaps: false,
          ...(stepped
            ? { paths: uPlot.paths.stepped({ align: 1 }), points: { show: false } }
            : { points: { show: few || hasIsolated(line.values), size: 6 } }),
        })),
      ],
    };
  }

  // A step chart gets one more x, the end of the last bucket, where each line
  // repeats its last value: the step of the last bucket then has its width.
  function plotData(chart) {
    if (chart.draw !== "steps" || !chart.x.length) {
      return [chart.x, ...chart.lines.map((line) => line.values)];
    }
    return [
      [...chart.x, chart.x_end],
      ...chart.lines.map((line) => [...line.values, line.values[line.values.length - 1]]),
    ];
  }

  function draw(chart, holder, timeZone) {
    const data = plotData(chart);
    const plot = new uPlot(options(chart, holder.clientWidth || 300, timeZone), data, holder);
    holder.dataset.drawn = "true";
    if ("ResizeObserver" in window) {
      let width = holder.clientWidth;
      new ResizeObserver(() => {
        if (holder.clientWidth !== width) {
          width = holder.clientWidth;
          plot.setSize({ width: width, height: HEIGHT });
        }
      }).observe(holder);
    }
  }

  function start() {
    const source = document.getElementById("operations-data");
    if (!source || typeof uPlot === "undefined") return;
    const payload = JSON.parse(source.textContent);
    for (const chart of payload.charts) {
      const holder = document.querySelector(`.plot[data-chart="${chart.id}"]`);
      if (holder && chart.lines.length) draw(chart, holder, payload.time_zone || "UTC");
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
