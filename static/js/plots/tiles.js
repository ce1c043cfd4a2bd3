// tiledGrid: a grid of many small maps drawn as images, one pixel a cell, hover per tile.
// (Shared by both pages through ../heatmap.js.)

import { addPlot } from "./draw.js";
import { LOG_FLOOR_EXP, MASKED_COLOR, WEIGHT_COLORSCALE, colourBar, escapeForPlotly, maxOf, scaledWeights } from "./figure.js";
import { axisHover, gridFrame } from "./thumbnails.js";

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
export function matrixImage(z, mode) {
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
