// Plotly helpers shared by every view. Token labels are user text: they reach
// Plotly only with & < > escaped as entities, so Plotly shows them literally and
// never as markup.

export const ANNOTATE_MAX_LEN = 16; // print the value in each cell up to this size
export const MASKED_COLOR = "#c8c8c8";
// ColorBrewer "Blues" (9 classes), white at 0: Plotly's own "Blues" ends in gray,
// which would look like a masked cell.
export const WEIGHT_COLORSCALE = [
  [0.0, "#f7fbff"], [0.125, "#deebf7"], [0.25, "#c6dbef"], [0.375, "#9ecae1"],
  [0.5, "#6baed6"], [0.625, "#4292c6"], [0.75, "#2171b5"], [0.875, "#08519c"],
  [1.0, "#08306b"],
];
// ColorBrewer "RdBu" for signed values (scores, Q, K, V, outputs), centred at 0.
export const SIGNED_COLORSCALE = [
  [0.0, "#2166ac"], [0.25, "#92c5de"], [0.5, "#f7f7f7"], [0.75, "#f4a582"], [1.0, "#b2182b"],
];
const PLOT_CONFIG = { responsive: true, displaylogo: false };

export function escapeForPlotly(text) {
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

// A masked cell is drawn gray when its weight is 0. Under a finite mask fill, a
// fully-masked row is uniform (as in the seeds): its weights are drawn.
export function visibleWeights(weights, mask) {
  return weights.map((row, i) => row.map((w, j) => (mask[i][j] || w !== 0 ? w : null)));
}

export function maxOf(matrix) {
  let largest = -Infinity;
  for (const row of matrix) for (const v of row) if (v !== null && v > largest) largest = v;
  return largest;
}

export function maxAbsOf(matrix) {
  let largest = 0;
  for (const row of matrix) for (const v of row) if (v !== null) largest = Math.max(largest, Math.abs(v));
  return largest;
}

// One matrix as a heatmap. options:
//   z (rows x cols, null = masked), rowLabels, colLabels, title, xTitle, yTitle,
//   signed (diverging scale centred at 0) or zmin/zmax, showscale,
//   maskedNote (hover text of null cells; they are drawn gray with a x).
export function heatmapFigure(options) {
  const z = options.z;
  const rowLabels = (options.rowLabels || z.map((_, i) => String(i))).map(escapeForPlotly);
  const colLabels = (options.colLabels || (z[0] || []).map((_, j) => String(j))).map(escapeForPlotly);
  const rows = rowLabels.map((_, i) => i);
  const cols = colLabels.map((_, j) => j);
  const annotate = Math.max(rows.length, cols.length) <= ANNOTATE_MAX_LEN;
  const customdata = rows.map((i) => cols.map((j) => [rowLabels[i], colLabels[j]]));
  const yName = options.yTitle || "Query";
  const xName = options.xTitle || "Key";
  const hoverHead = `${yName} %{customdata[0]} (row %{y})<br>${xName} %{customdata[1]} (col %{x})<br>`;
  const extreme = options.signed ? Math.max(maxAbsOf(z), 1e-12) : null;
  const traces = [
    {
      type: "heatmap",
      x: cols,
      y: rows,
      z: z,
      zmin: options.signed ? -extreme : (options.zmin ?? 0),
      zmax: options.signed ? extreme : (options.zmax ?? Math.max(maxOf(z), 1e-12)),
      colorscale: options.signed ? SIGNED_COLORSCALE : WEIGHT_COLORSCALE,
      showscale: options.showscale ?? true,
      colorbar: { thickness: 10 },
      customdata: customdata,
      hovertemplate: hoverHead + `${options.valueName || "value"} %{z:.4f}<extra></extra>`,
      texttemplate: annotate ? (options.textFormat || "%{z:.2f}") : "",
      hoverongaps: false,
      xgap: 1,
      ygap: 1,
    },
  ];
  if (z.some((row) => row.some((v) => v === null))) {
    traces.push({
      type: "heatmap",
      x: cols,
      y: rows,
      z: z.map((row) => row.map((v) => (v === null ? 1 : null))),
      colorscale: [[0, MASKED_COLOR], [1, MASKED_COLOR]],
      showscale: false,
      customdata: customdata,
      hovertemplate: hoverHead + `${options.maskedNote || "masked"}<extra></extra>`,
      text: z.map((row) => row.map((v) => (v === null ? "×" : ""))),
      texttemplate: annotate ? "%{text}" : "",
      textfont: { color: "#6b6b6b" },
      hoverongaps: false,
      xgap: 1,
      ygap: 1,
    });
  }
  const layout = {
    title: { text: escapeForPlotly(options.title || ""), font: { size: 13 } },
    margin: { l: 64, r: 8, t: 34, b: 64 },
    xaxis: { title: { text: xName }, tickvals: cols, ticktext: colLabels, tickangle: -45 },
    yaxis: { title: { text: yName }, tickvals: rows, ticktext: rowLabels, autorange: "reversed" },
    plot_bgcolor: "#ffffff",
    paper_bgcolor: "rgba(0,0,0,0)",
  };
  return { traces, layout };
}

// Draw a figure into a new div appended to container; returns the div.
export function addPlot(container, figure, className = "plot") {
  const div = document.createElement("div");
  div.className = className;
  container.append(div);
  Plotly.newPlot(div, figure.traces, figure.layout, PLOT_CONFIG);
  return div;
}

export function clearPlots(container) {
  for (const node of container.querySelectorAll(".js-plotly-plot")) Plotly.purge(node);
  container.replaceChildren();
}

export function newPlot(div, traces, layout) {
  return Plotly.newPlot(div, traces, layout, PLOT_CONFIG);
}
