// thumbnailGrid: one Plotly figure of rows x cols small heatmaps (layers x heads).
// (Shared by both pages through ../heatmap.js.)

import { addPlot } from "./draw.js";
import { MASKED_COLOR, WEIGHT_COLORSCALE, colourBar, escapeForPlotly, hoverData, maxOf, scaledWeights } from "./figure.js";

// The hover text of one axis of thumbnail (r, c): `given` (an array, or a function
// (r, c) -> array), else the bare positions "position i".
export function axisHover(given, r, c, count) {
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
export function gridFrame(options) {
  const { rows, cols } = options;
  const group = options.colGroup && options.colGroup < cols ? options.colGroup : 0;
  return {
    group,
    margin: { l: 60, r: 8, t: 30, b: group ? 48 : 30 },
    height: options.height ?? 40 + rows * Math.max(70, 320 / rows) + (group ? 18 : 0),
    xDomains: group ? cellDomains(cols, 0.06, group, 0.3) : null,
    yDomains: group ? cellDomains(rows, 0.08).map(([a, b]) => [1 - b, 1 - a]) : null,
    xgap: 0.06,
    ygap: options.cellTitle && rows > 1 ? 0.3 : 0.08,
  };
}

// The domains Plotly's layout.grid gives `count` cells with `gap` (a fraction of a cell's
// step): the first cell first along x; along y (rows top to bottom) the first is the top.
export function plotlyGridDomains(count, gap, topFirst = false) {
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
//   cellTitle(r, c) (a title under every cell, instead of colName under the last row),
//   height (px: the figure's, instead of gridFrame's from the rows).
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
