/* LabChart: a small, dependency-free SVG bar chart for lab tables.
 *
 * LabChart.render(spec, table, width) returns a <figure> holding an SVG drawn for
 * `width` CSS pixels, so its text stays legible on a phone as on a desktop. `spec` comes from the
 * lab's Chart declaration (course/labs/harness/base.py):
 *   {table, label, values: [column...], title, unit, split, categoryPrefix}
 * Without `split`, rows are categories and each value column is one series.
 * With `split`, the single value column holds space-separated numbers: each row is a
 * series (e.g. "consumers=2") and the positions are the categories ("round 3").
 */
(function () {
  "use strict";

  const SVG_NS = "http://www.w3.org/2000/svg";
  const PALETTE = ["#0f766e", "#f59e0b", "#6366f1", "#e11d48", "#0891b2", "#65a30d"];
  const MARGIN = { top: 26, right: 12, bottom: 40, left: 44 };

  function el(name, attrs, text) {
    const node = document.createElementNS(SVG_NS, name);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function toNumber(value) {
    if (value === null || value === undefined || value === "") return null;
    const number = Number(value);
    return Number.isFinite(number) ? number : null;
  }

  // Turn a table into {categories: [...], series: [{name, values: [...]}]}.
  function shape(spec, table) {
    const labelAt = table.columns.indexOf(spec.label);
    const valueAts = spec.values.map((name) => table.columns.indexOf(name));
    if (labelAt < 0 || valueAts.some((at) => at < 0)) return null;
    if (spec.split) {
      const series = table.rows.map((row) => ({
        name: `${spec.label}=${row[labelAt]}`,
        values: String(row[valueAts[0]]).trim().split(/\s+/).map(toNumber),
      }));
      const longest = Math.max(0, ...series.map((s) => s.values.length));
      const categories = Array.from(
        { length: longest },
        (_, i) => `${spec.categoryPrefix || ""}${i + 1}`,
      );
      return { categories, series };
    }
    return {
      categories: table.rows.map((row) => String(row[labelAt])),
      series: spec.values.map((name, i) => ({
        name,
        values: table.rows.map((row) => toNumber(row[valueAts[i]])),
      })),
    };
  }

  // A round step (1, 2 or 5 times a power of ten) giving about four grid lines.
  function niceStep(max) {
    const raw = max / 4;
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    const fraction = raw / power;
    const nice = fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 5 ? 5 : 10;
    return nice * power;
  }

  function format(value) {
    if (Number.isInteger(value)) return value.toLocaleString("en");
    return String(Math.round(value * 10) / 10);
  }

  function render(spec, table, width) {
    const data = shape(spec, table);
    if (data === null || data.categories.length === 0) return null;
    const WIDTH = Math.max(260, Math.round(width || 640));
    const HEIGHT = WIDTH < 480 ? 220 : 280;
    const all = data.series.flatMap((s) => s.values).filter((v) => v !== null);
    const top = Math.max(0, ...all);
    const step = top > 0 ? niceStep(top) : 1;
    // Headroom above the tallest bar keeps its value label clear of the unit label.
    const yMax = Math.max(step, Math.ceil((top * 1.08) / step) * step);
    const plotW = WIDTH - MARGIN.left - MARGIN.right;
    const plotH = HEIGHT - MARGIN.top - MARGIN.bottom;
    const y = (v) => MARGIN.top + plotH - (v / yMax) * plotH;

    const svg = el("svg", {
      viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
      class: "lab-chart-svg",
      role: "img",
      "aria-label": `${spec.title} (bar chart)`,
      preserveAspectRatio: "xMidYMid meet",
    });
    svg.appendChild(el("title", {}, spec.title));

    for (let v = 0; v <= yMax + step / 2; v += step) {
      svg.appendChild(
        el("line", { x1: MARGIN.left, x2: WIDTH - MARGIN.right, y1: y(v), y2: y(v), class: v === 0 ? "axis" : "grid" }),
      );
      svg.appendChild(
        el("text", { x: MARGIN.left - 8, y: y(v) + 4, class: "tick", "text-anchor": "end" }, format(v)),
      );
    }
    if (spec.unit) {
      svg.appendChild(el("text", { x: MARGIN.left, y: 14, class: "unit" }, spec.unit));
    }

    const groupW = plotW / data.categories.length;
    const inner = groupW * 0.78;
    const barW = inner / data.series.length;
    const showValues = data.categories.length * data.series.length <= 24 && barW >= 14;
    // Narrow groups keep only the position number ("3" rather than "round 3").
    const short = groupW < 64 && spec.split;
    const CHAR_PX = 8; // rough width of one label character at 13px, bold
    data.categories.forEach((category, ci) => {
      const x0 = MARGIN.left + ci * groupW + (groupW - inner) / 2;
      data.series.forEach((series, si) => {
        const value = series.values[ci];
        if (value === null || value === undefined) return;
        const bar = el("rect", {
          x: x0 + si * barW + 1,
          y: y(Math.max(0, value)),
          width: Math.max(1, barW - 2),
          height: Math.max(value > 0 ? 1 : 0, y(0) - y(Math.max(0, value))),
          rx: 3,
          fill: PALETTE[si % PALETTE.length],
        });
        bar.appendChild(el("title", {}, `${series.name}, ${category}: ${format(value)}${spec.unit === "%" ? "%" : ""}`));
        svg.appendChild(bar);
        if (showValues) {
          svg.appendChild(
            el("text", { x: x0 + si * barW + barW / 2, y: y(Math.max(0, value)) - 5, class: "value", "text-anchor": "middle" }, format(value)),
          );
        }
      });
      const text = short ? String(ci + 1) : category;
      const label = el("text", { x: MARGIN.left + ci * groupW + groupW / 2, y: HEIGHT - MARGIN.bottom + 18, class: "category", "text-anchor": "middle" }, text);
      if (text.length * CHAR_PX > groupW - 6) {
        // Squeeze a long label into its group rather than let it run into the next.
        label.setAttribute("textLength", String(Math.max(10, groupW - 6)));
        label.setAttribute("lengthAdjust", "spacingAndGlyphs");
      }
      svg.appendChild(label);
    });

    const figure = document.createElement("figure");
    figure.className = "lab-chart";
    const caption = document.createElement("figcaption");
    caption.textContent = spec.title;
    figure.appendChild(caption);
    figure.appendChild(svg);
    if (data.series.length > 1) {
      const legend = document.createElement("ul");
      legend.className = "lab-chart-legend";
      data.series.forEach((series, si) => {
        const item = document.createElement("li");
        const swatch = document.createElement("span");
        swatch.className = "swatch";
        swatch.style.background = PALETTE[si % PALETTE.length];
        item.append(swatch, series.name);
        legend.appendChild(item);
      });
      figure.appendChild(legend);
    }
    return figure;
  }

  window.LabChart = { render, shape };
})();
