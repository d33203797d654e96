/* The comparison page's charts: each {spec, table} pair the server prepared
 * (course/compare.py) drawn with LabChart, as wide as its column allows. */
(function () {
  "use strict";
  const data = document.getElementById("compare-charts-data");
  const box = document.querySelector("[data-compare-charts]");
  if (!data || !box || !window.LabChart) return;
  const charts = JSON.parse(data.textContent);
  const columns = box.clientWidth >= 900 && charts.length > 1 ? 2 : 1;
  box.style.setProperty("--chart-columns", String(columns));
  const width = Math.max(280, Math.floor(box.clientWidth / columns) - 16);
  for (const chart of charts) {
    const figure = window.LabChart.render(chart.spec, chart.table, width);
    if (figure) box.appendChild(figure);
  }
})();
