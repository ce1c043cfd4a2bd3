import { option } from "./api.js";

// Plotly helpers shared by every view. Token labels are user text: they reach
// Plotly only with & < > escaped as entities, so Plotly shows them literally and
// never as markup.

const ANNOTATE_MAX_LEN = 16; // print the value in each cell up to this size
// Above this many rows or columns a heatmap drops the cell gaps and labels every
// k-th tick only: drawing cost then scales with the cells.
const DETAIL_MAX_LEN = 64;
const MAX_TICKS = 32;

// Tick labels longer than this are cut with "…" (the hover gives them whole); the
// margins are made wide enough for the longest label left (tickMargins), so none is
// clipped by the figure's edge. (Plotly's automargin would do it too, but by redrawing
// after the first draw, which moved the cells under a hover computed from the first.)
const MAX_TICK_CHARS = 20;
const TICK_CHAR_PX = 7; // the width of a character of the 12 px tick font, generously

// Left and bottom margins (px) that hold the longest y tick label and the longest x one
// (drawn at -45°, so its height is its length / √2), with the axis titles.
function tickMargins(rowTicks, colTicks) {
  const longest = (labels) => Math.max(0, ...labels.map((t) => [...t].length));
  return {
    l: Math.max(64, 30 + TICK_CHAR_PX * longest(rowTicks)),
    b: Math.max(64, 34 + Math.ceil((TICK_CHAR_PX * longest(colTicks)) / Math.SQRT2)),
  };
}

function tickLabel(label) {
  const chars = [...label];
  return chars.length > MAX_TICK_CHARS ? `${chars.slice(0, MAX_TICK_CHARS - 1).join("")}…` : label;
}

// Tick values and text of an axis of plain-text `labels` (escaped here, after the cut).
function ticks(labels) {
  const stride = Math.max(1, Math.ceil(labels.length / MAX_TICKS));
  const tickvals = [];
  for (let i = 0; i < labels.length; i += stride) tickvals.push(i);
  return { tickvals, ticktext: tickvals.map((i) => escapeForPlotly(tickLabel(String(labels[i])))) };
}
const MASKED_COLOR = "#c8c8c8";
// ColorBrewer "Blues" (9 classes), white at 0: Plotly's own "Blues" ends in gray,
// which would look like a masked cell.
export const WEIGHT_COLORSCALE = [
  [0.0, "#f7fbff"], [0.125, "#deebf7"], [0.25, "#c6dbef"], [0.375, "#9ecae1"],
  [0.5, "#6baed6"], [0.625, "#4292c6"], [0.75, "#2171b5"], [0.875, "#08519c"],
  [1.0, "#08306b"],
];
// ColorBrewer "RdBu" for signed values (scores, Q, K, V, outputs), centred at 0.
const SIGNED_COLORSCALE = [
  [0.0, "#2166ac"], [0.25, "#92c5de"], [0.5, "#f7f7f7"], [0.75, "#f4a582"], [1.0, "#b2182b"],
];
// The modebar keeps the buttons a heatmap needs (zoom, pan, reset, save as PNG); the
// others (box/lasso select, zoom in/out, autoscale) only widened it over the titles.
const PLOT_CONFIG = {
  responsive: true,
  displaylogo: false,
  modeBarButtonsToRemove: ["select2d", "lasso2d", "zoomIn2d", "zoomOut2d", "autoScale2d"],
};
// Height (px) kept free at the top of every figure for the modebar, which Plotly draws
// over the top-right corner of the div: titles sit below it (see placeTitle).
const MODEBAR_HEIGHT = 34;
const TITLE_LINE_HEIGHT = 17;

export function escapeForPlotly(text) {
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

// Hover text of the positions along one axis of a map: "token 3: the", or, on a map
// block-pooled by `factor` (labels are then the server's block labels, "the…mat"),
// "tokens 0–7: the…mat". `length` is the number of positions before pooling.
// Plain text: heatmapFigure and thumbnailGrid escape it for Plotly.
export function tokenHover(labels, factor = 1, length = labels.length * factor) {
  return labels.map((label, k) => {
    if (factor <= 1) return `token ${k}: ${label}`;
    const first = k * factor;
    const last = Math.min(first + factor, length) - 1;
    return first === last ? `token ${first}: ${label}` : `tokens ${first}–${last}: ${label}`;
  });
}

// Hover text of the rows (queries) and columns (keys) of sequence b of an
// /api/v1/attention response, pooled (display_size) or not.
export function attentionHover(res, b) {
  const [, , Lq, Lk] = res.full_shape;
  const d = res.downsample;
  return {
    rowHover: tokenHover(res.query_labels[b], d ? d.factor_q : 1, Lq),
    colHover: tokenHover(res.key_labels[b], d ? d.factor_k : 1, Lk),
  };
}

// Hover text of the feature dimensions of Q, K, V or a head output: "dimension 2".
export function dimensionHover(count) {
  return [...Array(count).keys()].map((i) => `dimension ${i}`);
}

// The hover data of a rows x cols map whose row i reads rowHover[i] and column j
// colHover[j]: customdata (rows x cols, row i filled with rowHover[i]) and hovertext
// (every row the same array colHover), read as %{customdata} and %{hovertext}. The
// filled rows are slots pointing at one string each, and the columns one shared array.
function hoverData(rowHover, colHover) {
  const cols = colHover.map(escapeForPlotly);
  return {
    customdata: rowHover.map((text) => new Array(cols.length).fill(escapeForPlotly(text))),
    hovertext: rowHover.map(() => cols),
  };
}

// The top margin a figure's title of `text` (`<br>` separated lines) needs below the
// modebar.
function titledTop(text) {
  return MODEBAR_HEIGHT + text.split("<br>").length * TITLE_LINE_HEIGHT + 4;
}

// The title placed at the top left, below the modebar: `layout.margin.t` grows to hold
// the modebar and the title's lines (`<br>` separated).
function placeTitle(layout) {
  const text = layout.title && layout.title.text;
  if (!text) return layout;
  const top = titledTop(text);
  return {
    ...layout,
    title: {
      ...layout.title, x: 0, xref: "paper", xanchor: "left", y: 1, yref: "paper",
      yanchor: "bottom", pad: { b: 6 },
    },
    margin: { ...(layout.margin || {}), t: Math.max(top, (layout.margin || {}).t || 0) },
  };
}

// A masked cell is drawn gray when its weight is 0. Under a finite mask fill, a
// fully-masked row is uniform (as in the tutorials): its weights are drawn.
export function visibleWeights(weights, mask) {
  return weights.map((row, i) => row.map((w, j) => (mask[i][j] || w !== 0 ? w : null)));
}

export function maxOf(matrix) {
  let largest = -Infinity;
  for (const row of matrix) for (const v of row) if (v !== null && v > largest) largest = v;
  return largest;
}

function maxAbsOf(matrix) {
  let largest = 0;
  for (const row of matrix) for (const v of row) if (v !== null) largest = Math.max(largest, Math.abs(v));
  return largest;
}

// ---------------------------------------------------------------------------
// Colour scales of attention-weight maps: the page's "Colour scale" choice. Every mode
// colours weights 0 … top with WEIGHT_COLORSCALE; they differ in what "top" is:
//   shared: the largest weight of all the maps drawn together (every head of the view),
//           so heads can be compared;
//   head:   each map's own largest weight;
//   row:    each query row's own largest weight (every row's strongest key is darkest);
//   log:    log10 of the weight, from 1e-4 (and below) to 1: small weights stay visible;
//   auto:   row for maps of more than AUTO_ROW_LEN queries, the view's own default
//           (shared or head) up to it. A long causal map otherwise washes out: row 0 has
//           a single weight 1.0, which sets the top, while row i's weights are about 1/i.
// The hover and the cell numbers always give the weight itself.
export const COLOUR_SCALES = {
  auto: "auto", shared: "shared across heads", head: "per head", row: "per row", log: "logarithmic",
};
export const AUTO_ROW_LEN = 64;
const LOG_FLOOR_EXP = -4; // log mode: weights below 10^-4 get the lightest colour

// Fill a <select> with the COLOUR_SCALES choices (auto first, selected).
export function fillColourScales(select) {
  select.replaceChildren(...Object.entries(COLOUR_SCALES).map(([value, text]) => option(value, text)));
}

// The mode `scale` (a COLOUR_SCALES key) means for a map of `rows` query rows, in a view
// whose own default is `fallback` ("shared" or "head").
export function resolveScale(scale, rows, fallback = "shared") {
  if (!scale || scale === "auto") return rows > AUTO_ROW_LEN ? "row" : fallback;
  return scale;
}

// `z` (null = masked, kept null) in the colour units of `mode` ("row" or "log"):
// weight / its row's largest weight, or log10(weight) clipped to LOG_FLOOR_EXP.
export function scaledWeights(z, mode) {
  if (mode === "log") {
    return z.map((row) => row.map((v) => (
      v === null ? null : Math.max(LOG_FLOOR_EXP, Math.log10(Math.max(v, 0))))));
  }
  return z.map((row) => {
    let top = 0;
    for (const v of row) if (v !== null && v > top) top = v;
    return row.map((v) => (v === null ? null : (top > 0 ? v / top : 0)));
  });
}

// The titled colour bar of `mode`, with its value range: {zmin, zmax, colorbar}. `top`:
// the largest weight the linear modes colour darkest; `name`: what the maps hold.
export function colourBar(mode, top, name = "weight") {
  const bar = (text, extra = {}) => ({
    thickness: 10, title: { text, side: "right", font: { size: 11 } }, ...extra,
  });
  if (mode === "log") {
    const exps = [];
    for (let e = LOG_FLOOR_EXP; e <= 0; e += 1) exps.push(e);
    return {
      zmin: LOG_FLOOR_EXP, zmax: 0,
      colorbar: bar(`${name} (log scale)`, {
        tickvals: exps, ticktext: exps.map((e) => (e === LOG_FLOOR_EXP ? `≤${10 ** e}` : String(10 ** e))),
      }),
    };
  }
  if (mode === "row") {
    return {
      zmin: 0, zmax: 1,
      colorbar: bar(`${name} ÷ its row's max`, { tickvals: [0, 0.5, 1], ticktext: ["0", "½ max", "row max"] }),
    };
  }
  const title = mode === "head" ? `${name} (this head's range)` : name;
  return { zmin: 0, zmax: top > 0 ? top : 1, colorbar: bar(title) };
}

// One matrix as a heatmap. options:
//   z (rows x cols, null = masked), rowLabels, colLabels (tick labels, plain text),
//   rowHover, colHover (hover text of each row and column, plain text; default
//   tokenHover of the labels: "token i: label"; pooled maps pass tokenHover with
//   their factor, feature axes dimensionHover), title, xTitle, yTitle,
//   signed (diverging scale centred at 0) or zmin/zmax, showscale, colorTitle (the
//   colour bar's title; default valueName),
//   scale (weight maps: "shared", "head", "row" or "log", see colourBar; with "shared",
//   zmax is the top shared by the maps drawn together; "row" and "log" draw the scaled
//   values and keep the weights for the hover and the cell numbers),
//   maskedNote (hover text of null cells; they are drawn gray with a x).
// The figure's `cells` ({rows, cols}) let addPlot drop the cell numbers where a cell is
// drawn too small to read them.
export function heatmapFigure(options) {
  const z = options.z;
  const rawRows = options.rowLabels || z.map((_, i) => String(i));
  const rawCols = options.colLabels || (z[0] || []).map((_, j) => String(j));
  const rows = rawRows.map((_, i) => i);
  const cols = rawCols.map((_, j) => j);
  const size = Math.max(rows.length, cols.length);
  const annotate = size <= ANNOTATE_MAX_LEN;
  const detailed = size <= DETAIL_MAX_LEN;
  const { customdata, hovertext } = hoverData(
    options.rowHover || tokenHover(rawRows), options.colHover || tokenHover(rawCols),
  );
  const gap = detailed ? 1 : 0;
  const yName = options.yTitle || "Query";
  const xName = options.xTitle || "Key";
  const hoverHead = `${yName} %{customdata}<br>${xName} %{hovertext}<br>`;
  const valueName = options.valueName || "value";
  const extreme = options.signed ? Math.max(maxAbsOf(z), 1e-12) : null;
  const mode = options.scale || null;
  const range = mode
    ? colourBar(mode, mode === "shared" ? (options.zmax ?? maxOf(z)) : maxOf(z), valueName)
    : null;
  const scaled = mode === "row" || mode === "log";
  const main = {
    type: "heatmap",
    x: cols,
    y: rows,
    z: scaled ? scaledWeights(z, mode) : z,
    zmin: options.signed ? -extreme : (options.zmin ?? 0),
    zmax: options.signed ? extreme : (options.zmax ?? Math.max(maxOf(z), 1e-12)),
    colorscale: options.signed ? SIGNED_COLORSCALE : WEIGHT_COLORSCALE,
    showscale: options.showscale ?? true,
    colorbar: {
      thickness: 10,
      title: { text: escapeForPlotly(options.colorTitle || valueName), side: "right", font: { size: 11 } },
    },
    customdata,
    hovertext,
    hovertemplate: hoverHead + `${valueName} %{z:${options.hoverFormat || ".4f"}}<extra></extra>`,
    texttemplate: annotate ? (options.textFormat || "%{z:.2f}") : "",
    hoverongaps: false,
    xgap: gap,
    ygap: gap,
  };
  if (range) Object.assign(main, range);
  if (scaled) {
    // The weights themselves, for the hover (customdata [row text, weight]) and the cells.
    main.customdata = z.map((row, i) => row.map((v) => [customdata[i][0], v]));
    main.hovertemplate = `${yName} %{customdata[0]}<br>${xName} %{hovertext}<br>` +
      `${valueName} %{customdata[1]:.4f}<extra></extra>`;
    if (annotate) {
      main.text = z.map((row) => row.map((v) => (v === null ? "" : v.toFixed(2))));
      main.texttemplate = "%{text}";
    }
  }
  const traces = [main];
  if (z.some((row) => row.some((v) => v === null))) {
    traces.push({
      type: "heatmap",
      x: cols,
      y: rows,
      z: z.map((row) => row.map((v) => (v === null ? 1 : null))),
      colorscale: [[0, MASKED_COLOR], [1, MASKED_COLOR]],
      showscale: false,
      customdata,
      hovertext,
      hovertemplate: hoverHead + `${options.maskedNote || "masked"}<extra></extra>`,
      text: z.map((row) => row.map((v) => (v === null ? "×" : ""))),
      texttemplate: annotate ? "%{text}" : "",
      textfont: { color: "#6b6b6b" },
      hoverongaps: false,
      xgap: gap,
      ygap: gap,
    });
  }
  const xTicks = ticks(rawCols);
  const yTicks = ticks(rawRows);
  // The cut labels as the user reads them (the entities of & < > count one character).
  const plain = (labels) => labels.map((t) => t.replace(/&(amp|lt|gt);/g, "&"));
  const layout = {
    title: { text: escapeForPlotly(options.title || ""), font: { size: 13 } },
    margin: { r: 8, t: 34, ...tickMargins(plain(yTicks.ticktext), plain(xTicks.ticktext)) },
    xaxis: { title: { text: xName }, ...xTicks, tickangle: -45 },
    yaxis: { title: { text: yName }, ...yTicks, autorange: "reversed" },
    plot_bgcolor: "#ffffff",
    paper_bgcolor: "rgba(0,0,0,0)",
  };
  return { traces, layout, cells: { rows: rows.length, cols: cols.length } };
}

// Colours of the current theme (light or dark, from the CSS variables), and the title
// placed below the modebar.
function themed(layout) {
  const style = getComputedStyle(document.documentElement);
  const text = style.getPropertyValue("--text").trim() || "#1d2330";
  const axis = { color: text, gridcolor: style.getPropertyValue("--border").trim() };
  const merged = placeTitle({ ...layout, font: { color: text, ...(layout.font || {}) } });
  merged.paper_bgcolor = "rgba(0,0,0,0)";
  if (!layout.plot_bgcolor || layout.plot_bgcolor === "#ffffff") {
    merged.plot_bgcolor = style.getPropertyValue("--plot-bg").trim() || "#ffffff";
  }
  // Every axis gets its own copy: Plotly writes into the axis objects it is given (its
  // autotype), and one object shared by x and y made the y axis of a bar chart of
  // categories categorical too.
  for (const key of ["xaxis", "yaxis", ...Object.keys(merged)]) {
    if (/^[xy]axis\d*$/.test(key)) merged[key] = { ...axis, ...merged[key] };
  }
  return merged;
}

// Plotly.js (script#plotly-js) is loaded with `defer` after the page's module script
// (templates/base.html): the module runs first and sends its first request while the
// browser is still compiling Plotly.js (about 1 s on a 2-core machine). Every draw waits
// for this promise, which resolves to the Plotly object.
export const plotlyReady = new Promise((resolve, reject) => {
  if (window.Plotly) {
    resolve(window.Plotly);
    return;
  }
  const script = document.getElementById("plotly-js");
  script.addEventListener("load", () => resolve(window.Plotly));
  script.addEventListener("error", () => reject(new Error("Plotly.js did not load")));
});

// Draw a figure ({traces, layout}: a heatmapFigure, or any Plotly traces and layout) into
// a new div appended to container; returns the div, whose `drawn` promise resolves once
// Plotly has drawn it.
export function addPlot(container, figure, className = "plot") {
  const div = document.createElement("div");
  div.className = className;
  container.append(div);
  const traces = readableCells(div, figure);
  div.drawn = plotlyReady.then((plotly) => (
    plotly.newPlot(div, traces, themed(figure.layout), PLOT_CONFIG)));
  return div;
}

// addPlot's div, drawn only once div.draw(true) is called: `drawn` then resolves to the
// div as Plotly has drawn it; after div.draw(false) nothing is drawn and it resolves to
// null. drawOnScreenFirst draws a set of them.
export function addLazyPlot(container, figure, className = "plot") {
  const div = document.createElement("div");
  div.className = className;
  container.append(div);
  const wanted = new Promise((resolve) => { div.draw = resolve; });
  div.drawn = Promise.all([plotlyReady, wanted]).then(([plotly, draw]) => (draw
    ? plotly.newPlot(div, readableCells(div, figure), themed(figure.layout), PLOT_CONFIG)
    : null));
  return div;
}

// Draws lazy plots (addLazyPlot) in two passes: the ones on screen at once, then the others
// one at a time, each in a task of its own, so the browser paints the first ones and stays
// responsive in between (a Plotly heatmap takes about 45 ms to draw on a 2-core machine, 12
// of them 0.55 s). A plot no longer displayed (its view closed or redrawn) is skipped.
// Resolves, once every plot is drawn or skipped, to the performance.now() time (ms) at which
// the ones on screen were drawn.
export async function drawOnScreenFirst(divs) {
  const onScreen = (div) => {
    const box = div.getBoundingClientRect();
    return box.bottom > 0 && box.top < window.innerHeight && box.width > 0;
  };
  const first = divs.filter(onScreen);
  for (const div of first) div.draw(true);
  await Promise.all(first.map((div) => div.drawn));
  const shownAt = performance.now();
  for (const div of divs) {
    if (first.includes(div)) continue;
    await new Promise((resolve) => { setTimeout(resolve, 0); });
    div.draw(div.isConnected && div.offsetParent !== null);
    await div.drawn;
  }
  return shownAt;
}

// Cell numbers are drawn at CELL_TEXT_PX; a cell narrower than MIN_CELL_PX (the div's
// width less the margins, over the columns) cannot hold "0.25" at that size, so its
// numbers are dropped (the hover still gives them). Plotly would shrink them instead.
const CELL_TEXT_PX = 11;
const MIN_CELL_PX = 26;

function readableCells(div, figure) {
  if (!figure.cells) return figure.traces;
  const margin = figure.layout.margin || {};
  // The width less the margins and the colour bar; the height when it is known.
  const plotWidth = div.clientWidth - (margin.l ?? 80) - (margin.r ?? 80) - 40;
  const height = figure.layout.height || div.clientHeight;
  const plotHeight = height > 0 ? height - (margin.t ?? 100) - (margin.b ?? 80) : Infinity;
  const cellPx = Math.min(plotWidth / figure.cells.cols, plotHeight / figure.cells.rows);
  const readable = div.clientWidth === 0 || cellPx >= MIN_CELL_PX;
  return figure.traces.map((trace) => {
    if (!trace.texttemplate) return trace;
    return readable
      ? { ...trace, textfont: { size: CELL_TEXT_PX, ...(trace.textfont || {}) } }
      : { ...trace, texttemplate: "" };
  });
}

export function clearPlots(container) {
  for (const node of container.querySelectorAll(".js-plotly-plot")) Plotly.purge(node);
  container.replaceChildren();
}

// The hover text of one axis of thumbnail (r, c): `given` (an array, or a function
// (r, c) -> array), else the bare positions "position i".
function axisHover(given, r, c, count) {
  const texts = typeof given === "function" ? given(r, c) : given;
  return texts || [...Array(count).keys()].map((i) => `position ${i}`);
}

// The domains of `count` cells along one axis of a grid, in paper fractions [0, 1],
// first cell first: `gap` between cells and `groupGap` more between groups of
// `group` cells (both in cell widths).
function cellDomains(count, gap, group = count, groupGap = 0) {
  const groups = Math.ceil(count / group);
  const unit = 1 / (count + (count - 1) * gap + (groups - 1) * groupGap);
  return Array.from({ length: count }, (_, i) => {
    const start = (i * (1 + gap) + Math.floor(i / group) * groupGap) * unit;
    return [start, Math.min(1, start + unit)];
  });
}

// The frame of a thumbnailGrid figure (options as there): its column groups, margins
// (the top one as placeTitle makes it), height, and the cells' domains in paper
// fractions: with groups the figure's own (xDomains, yDomains), without them null (Plotly's
// layout.grid places the cells, with xgap and ygap).
function gridFrame(options) {
  const { rows, cols } = options;
  const group = options.colGroup && options.colGroup < cols ? options.colGroup : 0;
  return {
    group,
    margin: { l: 60, r: 8, t: 30, b: group ? 48 : 30 },
    height: 40 + rows * Math.max(70, 320 / rows) + (group ? 18 : 0),
    xDomains: group ? cellDomains(cols, 0.06, group, 0.3) : null,
    yDomains: group ? cellDomains(rows, 0.08).map(([a, b]) => [1 - b, 1 - a]) : null,
    xgap: 0.06,
    ygap: options.cellTitle && rows > 1 ? 0.3 : 0.08,
  };
}

// The domains Plotly's layout.grid gives `count` cells with `gap` (a fraction of a cell's
// step): the first cell first along x; along y (rows top to bottom) the first is the top.
function plotlyGridDomains(count, gap, topFirst = false) {
  const step = 1 / (count - gap);
  const domains = Array.from({ length: count }, (_, i) => [step * i, step * i + step * (1 - gap)]);
  return topFirst ? domains.reverse() : domains;
}

// One Plotly figure of rows x cols small heatmaps (the lessons' layers, the averages'
// strip of layers): one heatmap trace per cell on its own axes, drawn as SVG images, so
// a grid costs one figure and no WebGL context. Plotly's cost grows with the subplots:
// the model view's layers x heads grid (up to 30 x 9) is tiledGrid's one trace instead.
// options:
//   rows, cols, cell(r, c) -> matrix (null = masked, drawn gray),
//   rowName / colName (axis titles "L0", "H0": an empty rowName gives no row titles, an
//   empty colName bare numbers), title, zmax (a number shared by every cell, or "each" to
//   scale each cell to its own maximum), scale (a colour scale, resolveScale's: "shared"
//   one range for every cell, the given zmax or their largest weight; "head" each cell
//   its own; "row" each query row its own; "log" log10 of the weight; undefined: zmax
//   says), valueName (what the cells hold, for the hover and the colour bar: default
//   "weight"), hover(r, c) (the
//   cell's name), queryHover / keyHover (hover text of each row / column of the cells,
//   an array shared by every cell or a function (r, c) -> array: tokenHover of the
//   labels, with the pooling factor when pooled), onClick(r, c),
//   colGroup (columns per group, e.g. the query heads sharing one key/value head: the
//   groups are set apart by a wider gap and a dashed line) and groupLabel(g) (the text
//   under group g), count (the cells drawn, row by row: a last row may be short),
//   cellTitle(r, c) (a title under every cell, instead of colName under the last row).
// Returns the div (data-rows, data-cols and data-col-group say its shape); its `drawn`
// promise resolves once Plotly has drawn it.
export function thumbnailGrid(container, options) {
  const { rows, cols, cell } = options;
  const frame = gridFrame(options);
  const { group, xDomains, yDomains } = frame;
  const traces = [];
  const mode = options.scale || (options.zmax === "each" ? "head" : "shared");
  const valueName = options.valueName || "weight";
  let top = typeof options.zmax === "number" ? options.zmax : 0;
  if (mode === "shared" && !(top > 0)) {
    for (let n = 0; n < (options.count ?? rows * cols); n += 1) {
      top = Math.max(top, maxOf(cell(Math.floor(n / cols), n % cols)));
    }
  }
  const layout = {
    margin: frame.margin,
    title: { text: escapeForPlotly(options.title || ""), font: { size: 13 } },
    height: frame.height,
    showlegend: false,
    plot_bgcolor: MASKED_COLOR, // masked cells are null: the background shows through
  };
  // Without groups Plotly's own grid places the cells; with groups each axis gets its
  // domain, the groups a wider gap, and a dashed line and a label between and under them.
  if (group) {
    const groups = Math.ceil(cols / group);
    layout.shapes = [];
    layout.annotations = [];
    for (let g = 0; g < groups; g += 1) {
      const first = xDomains[g * group];
      const last = xDomains[Math.min(cols, (g + 1) * group) - 1];
      if (g > 0) {
        const x = (xDomains[g * group - 1][1] + first[0]) / 2;
        layout.shapes.push({
          type: "line", xref: "paper", yref: "paper", x0: x, x1: x, y0: 0, y1: 1,
          line: { color: "#8a94a6", width: 1, dash: "dot" },
        });
      }
      layout.annotations.push({
        xref: "paper", yref: "paper", x: (first[0] + last[1]) / 2, y: 0, yshift: -32,
        yanchor: "top", showarrow: false, font: { size: 11 },
        text: escapeForPlotly(options.groupLabel ? options.groupLabel(g) : `group ${g}`),
      });
    }
  } else {
    layout.grid = { rows, columns: cols, pattern: "independent", xgap: frame.xgap, ygap: frame.ygap };
  }
  for (let r = 0; r < rows; r += 1) {
    for (let c = 0; c < cols; c += 1) {
      const n = r * cols + c + 1;
      if (options.count !== undefined && n > options.count) break;
      const z = cell(r, c);
      // Row and log colour the scaled values; the hover gives the weight itself (text).
      const scaled = mode === "row" || mode === "log";
      const range = colourBar(mode, mode === "head" ? maxOf(z) : top, valueName);
      const { customdata, hovertext } = hoverData(
        axisHover(options.queryHover, r, c, z.length),
        axisHover(options.keyHover, r, c, (z[0] || []).length),
      );
      traces.push({
        type: "heatmap",
        z: scaled ? scaledWeights(z, mode) : z,
        text: scaled ? z.map((row) => row.map((v) => (v === null ? "" : v.toFixed(3)))) : undefined,
        zmin: range.zmin,
        zmax: range.zmax,
        colorscale: WEIGHT_COLORSCALE,
        // One titled colour bar, the first cell's; per cell ("head") it reads as fractions
        // of each cell's own maximum.
        showscale: traces.length === 0,
        colorbar: traces.length === 0 ? gridBar(mode, range, valueName) : undefined,
        xaxis: `x${n}`,
        yaxis: `y${n}`,
        meta: [r, c],
        customdata,
        hovertext,
        hovertemplate: `${escapeForPlotly(options.hover ? options.hover(r, c) : `${r}, ${c}`)}<br>` +
          `Query %{customdata}<br>Key %{hovertext}<br>${valueName} ` +
          `${scaled ? "%{text}" : "%{z:.3f}"}` +
          "<extra>click to enlarge</extra>",
      });
      // fixedrange: no zoom, so no axis drag handles either; these reached into the
      // thumbnail on the left and took its hover away.
      // A faint frame: small, mostly pale thumbnails (a phone's) stay apart.
      const bare = {
        showticklabels: false, showgrid: false, zeroline: false, ticks: "", fixedrange: true,
        showline: true, mirror: true, linecolor: "rgba(128, 128, 128, 0.35)", linewidth: 1,
      };
      const suffix = n === 1 ? "" : String(n); // the first axes are "xaxis", not "xaxis1"
      let xTitle;
      if (options.cellTitle) xTitle = escapeForPlotly(options.cellTitle(r, c));
      else if (r === rows - 1) xTitle = `${options.colName}${c}`;
      layout[`xaxis${suffix}`] = { ...bare, title: xTitle === undefined ? undefined : { text: xTitle, standoff: 2 } };
      layout[`yaxis${suffix}`] = { ...bare, autorange: "reversed", title: c === 0 && options.rowName ? { text: `${options.rowName}${r}`, standoff: 2 } : undefined };
      if (group) {
        layout[`xaxis${suffix}`].domain = xDomains[c];
        layout[`xaxis${suffix}`].anchor = `y${suffix}`;
        layout[`yaxis${suffix}`].domain = yDomains[r];
        layout[`yaxis${suffix}`].anchor = `x${suffix}`;
      }
    }
  }
  const div = addPlot(container, { traces, layout }, "plot grid-plot");
  div.dataset.rows = String(rows);
  div.dataset.cols = String(cols);
  if (group) div.dataset.colGroup = String(group);
  div.drawn = div.drawn.then(() => {
    if (options.onClick) {
      div.on("plotly_click", (event) => options.onClick(...event.points[0].data.meta));
    }
  });
  return div;
}

// thumbnailGrid's colour bar, beside the grid: `range` is the first cell's (colourBar's);
// per cell ("head") its ticks read as fractions of each cell's own maximum.
function gridBar(mode, range, name) {
  const bar = { ...range.colorbar, len: 0.9, x: 1.02 };
  if (mode === "head") {
    bar.title = { ...bar.title, text: `${name} (each map's range)` };
    bar.tickvals = [0, range.zmax / 2, range.zmax];
    bar.ticktext = ["0", "½ max", "its max"];
  }
  return bar;
}

// A tile's colours under `mode` (tiledGrid): in [0, 1] for the linear modes (weight over
// `top`, the tile's or the row's maximum), log10 of the weight for "log".
function tileColours(m, mode, top) {
  if (mode === "row" || mode === "log") return scaledWeights(m, mode);
  const scale = mode === "head" ? maxOf(m) : top;
  const k = scale > 0 ? 1 / scale : 1;
  return m.map((row) => row.map((v) => (v === null ? null : v * k)));
}

// tiledGrid's colour bar for tileColours' values, titled as colourBar's; the shared mode's
// ticks read as weights.
function tileBar(mode, top, name) {
  const range = colourBar(mode, 1, name);
  if (mode === "shared") {
    const ticks = [0, 0.25, 0.5, 0.75, 1];
    range.colorbar.tickvals = ticks;
    range.colorbar.ticktext = ticks.map((t) => (t * top).toFixed(2));
  } else if (mode === "head") {
    range.colorbar.tickvals = [0, 0.5, 1];
    range.colorbar.ticktext = ["0", "½ max", "head max"];
  }
  return { ...range, showscale: true };
}

// thumbnailGrid's figure as ONE heatmap trace: the cells are tiles of one matrix, set
// apart by blank gaps (null, drawn transparent), each on a gray box (a layout shape, so its
// masked cells show gray) with a faint frame. Plotly's cost is per subplot: 270 subplots
// (SmolLM2's 30 x 9) took about 1.8 s to draw here, one tiled trace about 0.5 s. Same
// options as thumbnailGrid (not count or cellTitle), every cell of one size. Each tile is
// coloured from 0 to its zmax ("each": its own maximum); the hover gives the cell's own
// weight. The div's cell(r, c) is that tile's matrix as given, and tiles = {rows, cols,
// height, width, x, y} (x[c] and y[r]: a tile's first column and row in the big matrix)
// locates a cell: query i, key j of tile (r, c) is column x[c] + j, row y[r] + i.
export function tiledGrid(container, options) {
  const { rows, cols, cell } = options;
  const frame = gridFrame(options);
  const { group } = frame;
  const mode = options.scale || (options.zmax === "each" ? "head" : "shared");
  const valueName = options.valueName || "weight";
  let top = typeof options.zmax === "number" ? options.zmax : 0;
  if (mode === "shared" && !(top > 0)) {
    for (let r = 0; r < rows; r += 1) for (let c = 0; c < cols; c += 1) top = Math.max(top, maxOf(cell(r, c)));
  }
  const first = cell(0, 0);
  const tileHeight = first.length;
  const tileWidth = (first[0] || []).length;
  // Gaps in cells, as gridFrame's gaps in cell widths (at least one cell).
  const gapX = Math.max(1, Math.round(tileWidth * frame.xgap / (1 - frame.xgap)));
  const gapY = Math.max(1, Math.round(tileHeight * frame.ygap / (1 - frame.ygap)));
  const groupGap = group ? Math.max(2, Math.round(tileWidth * 0.3)) : 0;
  const x = [];
  let width = 0;
  for (let c = 0; c < cols; c += 1) {
    if (c > 0) width += gapX + (group && c % group === 0 ? groupGap : 0);
    x.push(width);
    width += tileWidth;
  }
  const y = Array.from({ length: rows }, (_, r) => r * (tileHeight + gapY));
  const height = rows * tileHeight + (rows - 1) * gapY;
  // What is under each big column: its tile column (-1 in a gap) and key index.
  const tileOfX = new Int32Array(width).fill(-1);
  for (let c = 0; c < cols; c += 1) tileOfX.fill(c, x[c], x[c] + tileWidth);
  const tileOfY = new Int32Array(height).fill(-1);
  for (let r = 0; r < rows; r += 1) tileOfY.fill(r, y[r], y[r] + tileHeight);
  const z = [];
  const weights = [];
  const queryText = [];
  const keyText = [];
  const blankRow = new Array(width).fill(null);
  for (let r = 0; r < rows; r += 1) {
    if (r > 0) {
      for (let g = 0; g < gapY; g += 1) {
        z.push(blankRow);
        weights.push(blankRow);
        queryText.push(blankRow);
        keyText.push(blankRow);
      }
    }
    const maps = Array.from({ length: cols }, (_, c) => cell(r, c));
    const scaled = maps.map((m) => tileColours(m, mode, top));
    const queries = maps.map((m, c) => axisHover(options.queryHover, r, c, m.length).map(escapeForPlotly));
    const names = maps.map((_, c) => escapeForPlotly(options.hover ? options.hover(r, c) : `${r}, ${c}`));
    // The key labels of this row of tiles, one array for all of its rows.
    const keys = new Array(width).fill(null);
    maps.forEach((m, c) => {
      const labels = axisHover(options.keyHover, r, c, (m[0] || []).length);
      for (let j = 0; j < tileWidth; j += 1) keys[x[c] + j] = escapeForPlotly(labels[j]);
    });
    for (let i = 0; i < tileHeight; i += 1) {
      const colour = new Array(width).fill(null);
      const weight = new Array(width).fill(null);
      const query = new Array(width).fill(null);
      maps.forEach((m, c) => {
        const row = m[i];
        const shown = scaled[c][i];
        const text = `${names[c]}<br>Query ${queries[c][i]}`;
        for (let j = 0; j < tileWidth; j += 1) {
          const v = row[j];
          if (v === null || v === undefined) continue;
          colour[x[c] + j] = shown[j];
          weight[x[c] + j] = v;
          query[x[c] + j] = text;
        }
      });
      z.push(colour);
      weights.push(weight);
      queryText.push(query);
      keyText.push(keys);
    }
  }
  const bare = {
    showgrid: false, zeroline: false, ticks: "", fixedrange: true, showline: false,
  };
  const shapes = [];
  for (let r = 0; r < rows; r += 1) {
    for (let c = 0; c < cols; c += 1) {
      shapes.push({
        type: "rect", layer: "below", xref: "x", yref: "y",
        x0: x[c] - 0.5, x1: x[c] + tileWidth - 0.5, y0: y[r] - 0.5, y1: y[r] + tileHeight - 0.5,
        fillcolor: MASKED_COLOR, line: { color: "rgba(128, 128, 128, 0.35)", width: 1 },
      });
    }
  }
  const annotations = [];
  if (group) {
    for (let g = 0; g * group < cols; g += 1) {
      const from = x[g * group];
      const to = x[Math.min(cols, (g + 1) * group) - 1] + tileWidth;
      if (g > 0) {
        const between = (x[g * group - 1] + tileWidth + from) / 2 - 0.5;
        shapes.push({
          type: "line", xref: "x", yref: "paper", x0: between, x1: between, y0: 0, y1: 1,
          line: { color: "#8a94a6", width: 1, dash: "dot" },
        });
      }
      annotations.push({
        xref: "x", yref: "paper", x: (from + to) / 2 - 0.5, y: 0, yshift: -32,
        yanchor: "top", showarrow: false, font: { size: 11 },
        text: escapeForPlotly(options.groupLabel ? options.groupLabel(g) : `group ${g}`),
      });
    }
  }
  const centre = (start, size) => start + (size - 1) / 2;
  const layout = {
    margin: frame.margin,
    title: { text: escapeForPlotly(options.title || ""), font: { size: 13 } },
    height: frame.height,
    showlegend: false,
    plot_bgcolor: "rgba(0,0,0,0)", // the gaps show the page; masked cells their gray box
    shapes,
    annotations,
    xaxis: {
      ...bare, range: [-0.5, width - 0.5],
      tickvals: x.map((start) => centre(start, tileWidth)),
      ticktext: x.map((_, c) => `${options.colName}${c}`),
      showticklabels: true,
    },
    yaxis: {
      ...bare, range: [height - 0.5, -0.5],
      tickvals: options.rowName ? y.map((start) => centre(start, tileHeight)) : [],
      ticktext: options.rowName ? y.map((_, r) => `${options.rowName}${r}`) : [],
      showticklabels: Boolean(options.rowName),
    },
  };
  const trace = {
    type: "heatmap", z, colorscale: WEIGHT_COLORSCALE, ...tileBar(mode, top, valueName),
    hoverongaps: false, customdata: weights, hovertext: queryText, text: keyText,
    hovertemplate: `%{hovertext}<br>Key %{text}<br>${valueName} %{customdata:.3f}` +
      "<extra>click to enlarge</extra>",
  };
  const div = addPlot(container, { traces: [trace], layout }, "plot grid-plot");
  div.dataset.rows = String(rows);
  div.dataset.cols = String(cols);
  if (group) div.dataset.colGroup = String(group);
  div.cell = (r, c) => cell(r, c);
  div.tiles = { rows, cols, height: tileHeight, width: tileWidth, x, y };
  div.dataset.scale = mode;
  div.drawn = div.drawn.then(() => {
    if (options.onClick) {
      div.on("plotly_click", (event) => {
        const [i, j] = event.points[0].pointNumber;
        const r = tileOfY[i];
        const c = tileOfX[j];
        if (r >= 0 && c >= 0) options.onClick(r, c);
      });
    }
  });
  return div;
}

// The colours of WEIGHT_COLORSCALE at 256 levels (r, g, b each), made once: a
// preview's cells.
let weightLevels = null;

function weightColors() {
  if (weightLevels) return weightLevels;
  const stops = WEIGHT_COLORSCALE.map(([at, hex]) => [at, [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16))]);
  weightLevels = new Uint8ClampedArray(256 * 3);
  for (let k = 0; k < 256; k += 1) {
    const t = k / 255;
    let s = 1;
    while (s < stops.length - 1 && stops[s][0] < t) s += 1;
    const [a, from] = stops[s - 1];
    const [b, to] = stops[s];
    const f = (t - a) / (b - a);
    for (let i = 0; i < 3; i += 1) weightLevels[k * 3 + i] = from[i] + f * (to[i] - from[i]);
  }
  return weightLevels;
}

// Matrix z (null = masked, gray) as ImageData, one pixel a cell, from 0 to zmax ("each":
// its own maximum), as thumbnailGrid's heatmaps colour it; null when z is empty.
function matrixImage(z, mode) {
  const height = z.length;
  const width = (z[0] || []).length;
  if (!height || !width) return null;
  const image = new ImageData(width, height);
  const pixels = image.data;
  // tileColours' values: [0, 1], or log10 in [LOG_FLOOR_EXP, 0]. A streamed grid does not
  // know the shared maximum before its last layer: its stand-in scales "shared" per tile.
  const colours = tileColours(z, mode === "shared" ? "head" : mode, 1);
  const offset = mode === "log" ? -LOG_FLOOR_EXP : 0;
  const scale = mode === "log" ? 255 / -LOG_FLOOR_EXP : 255;
  const levels = weightColors();
  let p = 0;
  for (const row of colours) {
    for (const c of row) {
      const v = c === null ? null : c + offset;
      if (v === null) {
        pixels[p] = 0xc8; // MASKED_COLOR
        pixels[p + 1] = 0xc8;
        pixels[p + 2] = 0xc8;
      } else {
        const k = 3 * Math.round(Math.min(255, Math.max(0, v * scale)));
        pixels[p] = levels[k];
        pixels[p + 1] = levels[k + 1];
        pixels[p + 2] = levels[k + 2];
      }
      pixels[p + 3] = 255;
      p += 4;
    }
  }
  return image;
}

function previewLabel(parent, className, text, box) {
  const label = document.createElement("span");
  label.className = className;
  label.textContent = text;
  for (const [key, value] of Object.entries(box)) label.style[key] = `${value}px`;
  parent.append(label);
  return label;
}

// A stand-in for thumbnailGrid's figure while its cells arrive (a streamed grid): the
// same size, title, labels and cell boxes (options as thumbnailGrid's; the cells are not
// read), the cells painted on one canvas, each blank until fillRow(r, matrices) paints
// row r (one matrix per column; a few ms a row, where Plotly draws the whole figure again
// for any change). One canvas, not one per cell: 270 canvases were 270 layers for the
// browser to composite at every change, in software on a machine without a GPU.
// Once every row is in, thumbnailGrid draws the figure into the same container and the
// stand-in lies over it until it is drawn: cover() before thumbnailGrid, then remove().
// Returns {element, fillRow, filled (rows painted), cover, remove}; element holds the
// canvas (.grid-preview-canvas) and the labels.
export function thumbnailPreview(container, options) {
  const { rows, cols } = options;
  const frame = gridFrame(options);
  const element = document.createElement("div");
  element.className = "plot grid-plot grid-preview";
  element.setAttribute("role", "img");
  element.setAttribute("aria-label", `${options.title || "Grid"}: being drawn`);
  element.style.height = `${frame.height}px`;
  container.append(element);
  // The figure's plot area (Plotly's: the div's width, its margins), and each cell's box.
  const width = element.clientWidth;
  const { l, r, b } = frame.margin;
  const t = options.title ? Math.max(titledTop(escapeForPlotly(options.title)), frame.margin.t) : frame.margin.t;
  const plotWidth = width - l - r;
  const plotHeight = frame.height - t - b;
  const xDomains = frame.xDomains || plotlyGridDomains(cols, frame.xgap);
  const yDomains = frame.yDomains || plotlyGridDomains(rows, frame.ygap, true);
  const boxOf = (row, col) => ({
    left: l + xDomains[col][0] * plotWidth,
    top: t + (1 - yDomains[row][1]) * plotHeight,
    width: (xDomains[col][1] - xDomains[col][0]) * plotWidth,
    height: (yDomains[row][1] - yDomains[row][0]) * plotHeight,
  });
  if (options.title) {
    previewLabel(element, "grid-preview-title", options.title, { left: l, bottom: frame.height - t + 6 });
  }
  const canvas = document.createElement("canvas");
  canvas.className = "grid-preview-canvas";
  const ratio = window.devicePixelRatio || 1;
  canvas.width = Math.max(1, Math.round(width * ratio));
  canvas.height = Math.max(1, Math.round(frame.height * ratio));
  canvas.style.left = "0px";
  canvas.style.top = "0px";
  canvas.style.width = `${width}px`;
  canvas.style.height = `${frame.height}px`;
  element.append(canvas);
  const context = canvas.getContext("2d");
  context.imageSmoothingEnabled = false;
  const scratch = document.createElement("canvas");
  const scratchContext = scratch.getContext("2d");
  const background = getComputedStyle(document.documentElement).getPropertyValue("--bg").trim() || "#ffffff";
  const pixelsOf = (box) => [box.left, box.top, box.width, box.height].map((v) => Math.round(v * ratio));
  const boxes = [];
  for (let row = 0; row < rows; row += 1) {
    const line = [];
    for (let col = 0; col < cols; col += 1) {
      const box = boxOf(row, col);
      line.push(box);
      const [x, y, w, h] = pixelsOf(box);
      context.fillStyle = background;
      context.fillRect(x, y, w, h);
      context.strokeStyle = "rgba(128, 128, 128, 0.35)";
      context.strokeRect(x + 0.5, y + 0.5, w - 1, h - 1);
      if (col === 0 && options.rowName) {
        previewLabel(element, "grid-preview-row", `${options.rowName}${row}`,
          { right: width - box.left + 2, top: box.top, height: box.height });
      }
      let title = null;
      if (options.cellTitle) title = options.cellTitle(row, col);
      else if (row === rows - 1) title = `${options.colName}${col}`;
      if (title !== null) {
        previewLabel(element, "grid-preview-col", title,
          { left: box.left, top: box.top + box.height + 2, width: box.width });
      }
    }
    boxes.push(line);
  }
  if (frame.group) {
    const groups = Math.ceil(cols / frame.group);
    for (let g = 0; g < groups; g += 1) {
      const first = xDomains[g * frame.group];
      const last = xDomains[Math.min(cols, (g + 1) * frame.group) - 1];
      if (g > 0) {
        const x = (xDomains[g * frame.group - 1][1] + first[0]) / 2;
        previewLabel(element, "grid-preview-line", "", { left: l + x * plotWidth, top: t, height: plotHeight });
      }
      const text = options.groupLabel ? options.groupLabel(g) : `group ${g}`;
      previewLabel(element, "grid-preview-group", text, {
        left: l + first[0] * plotWidth, width: (last[1] - first[0]) * plotWidth,
        top: t + plotHeight + 32,
      });
    }
  }
  const preview = {
    element,
    filled: 0,
    fillRow(row, matrices) {
      matrices.forEach((z, col) => {
        const image = matrixImage(z, options.scale || "head");
        if (image === null) return;
        scratch.width = image.width;
        scratch.height = image.height;
        scratchContext.putImageData(image, 0, 0);
        const [x, y, w, h] = pixelsOf(boxes[row][col]);
        context.drawImage(scratch, x + 1, y + 1, w - 2, h - 2);
      });
      preview.filled += 1;
    },
    // The container keeps the stand-in's height meanwhile: Plotly lays out the figure's
    // div while it is still empty, and a page that shrinks under a reader scrolls.
    cover() {
      const margin = parseFloat(getComputedStyle(element).marginBottom) || 0;
      container.style.minHeight = `${element.offsetHeight + margin}px`;
      element.classList.add("covering");
    },
    remove() {
      element.remove();
      container.style.minHeight = "";
    },
  };
  return preview;
}
