// One map as a Plotly heatmap figure: ticks, hover, titles, colour scales, the theme.
// (Shared by both pages through ../heatmap.js.)

import { option } from "../lib/form.js";

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
export function ticks(labels) {
  const stride = Math.max(1, Math.ceil(labels.length / MAX_TICKS));
  const tickvals = [];
  for (let i = 0; i < labels.length; i += stride) tickvals.push(i);
  return { tickvals, ticktext: tickvals.map((i) => escapeForPlotly(tickLabel(String(labels[i])))) };
}
export const MASKED_COLOR = "#c8c8c8";
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
// Its camera is AttnViz's own (Plotly's saves the page's transparent paper): the PNG of
// exportFigure, opaque in the page's theme.
export const PLOT_CONFIG = {
  responsive: true,
  displaylogo: false,
  modeBarButtonsToRemove: ["select2d", "lasso2d", "zoomIn2d", "zoomOut2d", "autoScale2d", "toImage"],
  modeBarButtonsToAdd: [{
    name: "themedImage",
    title: "Download plot as a PNG",
    get icon() { return window.Plotly.Icons.camera; }, // read when the modebar is drawn
    click: (div) => saveImage(div, "png", "attnviz-plot"),
  }],
};
// Height (px) kept free at the top of every figure for the modebar, which Plotly draws
// over the top-right corner of the div: titles sit below it (see placeTitle).
const MODEBAR_HEIGHT = 34;
const TITLE_LINE_HEIGHT = 17;
const TITLE_LINE_SPACING = 1.3; // Plotly's line height, in font sizes
const DEFAULT_TITLE_PX = 17; // Plotly's title font: 1.4 times the layout's 12 px

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
export function hoverData(rowHover, colHover) {
  const cols = colHover.map(escapeForPlotly);
  return {
    customdata: rowHover.map((text) => new Array(cols.length).fill(escapeForPlotly(text))),
    hovertext: rowHover.map(() => cols),
  };
}

// The top margin a figure's title of `text` (`<br>` separated lines) needs below the
// modebar.
export function titledTop(text) {
  return MODEBAR_HEIGHT + text.split("<br>").length * TITLE_LINE_HEIGHT + 4;
}

// The title placed at the top left, below the modebar: `layout.margin.t` grows to hold
// the modebar and the title's lines (`<br>` separated).
function placeTitle(layout) {
  const text = layout.title && layout.title.text;
  if (!text) return layout;
  // Plotly sets a title's first line on its anchor and the next lines below it, over the
  // plot: a title of several lines is padded up by those lines.
  const lines = text.split("<br>").length;
  const lineHeight = ((layout.title.font && layout.title.font.size) || DEFAULT_TITLE_PX) *
    TITLE_LINE_SPACING;
  const pad = 6 + (lines - 1) * lineHeight;
  const top = lines > 1
    ? Math.max(titledTop(text), Math.ceil(MODEBAR_HEIGHT + pad + lineHeight + 2))
    : titledTop(text);
  return {
    ...layout,
    title: {
      ...layout.title, x: 0, xref: "paper", xanchor: "left", y: 1, yref: "paper",
      yanchor: "bottom", pad: { b: pad },
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
export const LOG_FLOOR_EXP = -4; // log mode: weights below 10^-4 get the lightest colour

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
  // An all-zero signed map (two equal maps' difference) gets ±1, not ±1e-12 ("1p" ticks).
  const extreme = options.signed ? (maxAbsOf(z) > 0 ? maxAbsOf(z) : 1) : null;
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
      // Plain numbers (0.002, 1e-7), never SI prefixes ("2m", "100n") on a weight.
      ...(options.signed ? { tickformat: ".2~g" } : {}),
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

// The page's theme: the CSS variables of the light or the dark palette, which the system
// setting chooses (prefers-color-scheme in attnviz.css; the page has no toggle of its own).
function themeColours() {
  const style = getComputedStyle(document.documentElement);
  const read = (name, fallback) => style.getPropertyValue(name).trim() || fallback;
  return {
    text: read("--text", "#1d2330"),
    border: read("--border", "#d9dde5"),
    panel: read("--panel", "#ffffff"),
    plotBg: read("--plot-bg", "#ffffff"),
  };
}

// The plot backgrounds `themed` gave figures (a theme's --plot-bg): an export re-themes them.
const THEMED_PLOT_BGS = new Set();

// Colours of the current theme (light or dark, from the CSS variables), and the title
// placed below the modebar. The paper stays transparent on the page: the panel behind
// it shows through (exportFigure makes it opaque).
export function themed(layout) {
  const theme = themeColours();
  const axis = { color: theme.text, gridcolor: theme.border };
  const merged = placeTitle({ ...layout, font: { color: theme.text, ...(layout.font || {}) } });
  merged.paper_bgcolor = "rgba(0,0,0,0)";
  if (!layout.plot_bgcolor || layout.plot_bgcolor === "#ffffff") {
    merged.plot_bgcolor = theme.plotBg;
    THEMED_PLOT_BGS.add(theme.plotBg);
  }
  // Every axis gets its own copy: Plotly writes into the axis objects it is given (its
  // autotype), and one object shared by x and y made the y axis of a bar chart of
  // categories categorical too.
  for (const key of ["xaxis", "yaxis", ...Object.keys(merged)]) {
    if (/^[xy]axis\d*$/.test(key)) merged[key] = { ...axis, ...merged[key] };
  }
  return merged;
}

// A drawn figure (Plotly's div) as it leaves the page, for paper and slides: on an opaque
// paper of the page's current theme (its panel colour: white, or near black in the dark
// theme), with the theme's text, axis and grid colours, so that no text is lost on the
// other colour. {data, layout, width, height}: Plotly.toImage's figure, at the div's size.
export function exportFigure(div) {
  const theme = themeColours();
  const layout = {
    ...div.layout,
    paper_bgcolor: theme.panel,
    font: { ...(div.layout.font || {}), color: theme.text },
  };
  if (THEMED_PLOT_BGS.has(layout.plot_bgcolor)) layout.plot_bgcolor = theme.plotBg;
  for (const key of Object.keys(layout)) {
    if (/^[xy]axis\d*$/.test(key)) {
      layout[key] = { ...layout[key], color: theme.text, gridcolor: theme.border };
    }
  }
  const { width, height } = div._fullLayout;
  return { data: div.data, layout, width, height };
}

// Save a drawn figure as `filename`.png or .svg (exportFigure: opaque, in the theme).
export function saveImage(div, format, filename) {
  const { width, height, ...figure } = exportFigure(div);
  return window.Plotly.downloadImage(figure, { format, filename, width, height });
}
