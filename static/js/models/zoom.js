// The enlarged head's zoom: exact tiles of the input's kept pass, as HiGlass serves a
// matrix (POST /api/v1/models/attention/tiles). Level 0 is the whole map in one tile of
// at most 256 x 256 cells; each level halves the tokens a cell holds, down to one token a
// cell, where the tokens label the axes. The wheel (or + and −) zooms in on the cell under
// the pointer and out again, a drag (or the arrow keys and buttons) moves one tile over.
// Nothing of the map is held here but the tile on screen: a 128k-token map zooms the same.
import { decodeArrays, errorText } from "../api.js";
import { addPlot, clearPlots, heatmapFigure } from "../heatmap.js";
import { displayTokens } from "../lib/display.js";
import { colourMode, valueName } from "./form.js";
import { blockLabels, keyTokens, queryTokens } from "./response.js";

const TILE_SIDE = 256; // cells a side at most (the API's tiles)
const DRAG_PX = 30; // a drag shorter than this moves nothing

// The hover text of one axis of a tile: each cell's token positions and tokens.
function axisHover(labels, start, stop, factor) {
  return labels.map((label, k) => {
    const first = start + k * factor;
    const last = Math.min(first + factor, stop) - 1;
    return first === last ? `token ${first}: ${label}` : `tokens ${first}–${last}: ${label}`;
  });
}

// The tile's figure: token labels at one token a cell, blocks ("the…mat") above.
function tileFigure(res, tile, title) {
  const [r0, r1] = tile.rows;
  const [c0, c1] = tile.cols;
  const rows = blockLabels(displayTokens(queryTokens(res).slice(r0, r1)), tile.factor);
  const cols = blockLabels(displayTokens(keyTokens(res).slice(c0, c1)), tile.factor);
  const figure = heatmapFigure({
    z: tile.weights, rowLabels: rows, colLabels: cols, title, zmin: 0,
    valueName: valueName(), scale: colourMode(rows.length),
    rowHover: axisHover(rows, r0, r1, tile.factor), colHover: axisHover(cols, c0, c1, tile.factor),
  });
  figure.layout.dragmode = false; // a drag moves tiles (below), not Plotly's box zoom
  return figure;
}

// What the zoom says of its tile: the level, the tokens a cell, the part of the map.
function describeTile(tile) {
  const cell = tile.factor === 1 ? "one token a cell" : `${tile.factor} × ${tile.factor} tokens a cell (block max)`;
  return `Zoom level ${tile.z} of ${tile.max_z}: ${cell}; queries ${tile.rows[0]}–${tile.rows[1] - 1}, ` +
    `keys ${tile.cols[0]}–${tile.cols[1] - 1} of ${tile.query_length} × ${tile.key_length} ` +
    `(${tile.compute_ms.toFixed(0)} ms, exact weights from the kept pass).`;
}

// One tile of head h of layer l from the server: the API's answer, arrays decoded, or
// {error, gone} (gone: the pass is no longer kept, a 410).
async function fetchTile(res, l, h, z, x, y) {
  const body = {
    pass_key: res.pass_key, block: res.block, layer_index: l, head_index: h, z, x, y,
    encoding: "base64_float32",
  };
  const response = await fetch("/api/v1/models/attention/tiles", {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body),
  });
  const data = await response.json().catch(() => null);
  if (!response.ok) return { error: errorText(data, response.status), gone: response.status === 410 };
  return decodeArrays(data);
}

// The zoom of head h of layer l, under the enlarged head in `container`, for an input whose
// pass the server kept (res.pass_key). Its element (.zoom) carries data-z, data-x, data-y,
// data-factor and data-drawn ("true" once a tile is drawn) for the tests.
export function addZoom(container, res, l, h) {
  const box = document.createElement("section");
  box.className = "zoom";
  box.tabIndex = 0;
  box.setAttribute("aria-label", `Zoom into layer ${l}, head ${h}: wheel or + and − to zoom, drag or arrow keys to move`);
  const bar = document.createElement("div");
  bar.className = "zoom-controls";
  const note = document.createElement("p");
  note.className = "zoom-note";
  note.setAttribute("aria-live", "polite");
  const plot = document.createElement("div");
  plot.className = "zoom-plot";
  box.append(bar, note, plot);
  container.append(box);
  const at = { z: 0, x: 0, y: 0, tile: null, hovered: null, loading: null };

  async function show(z, x, y) {
    const ticket = (at.loading = {});
    box.dataset.drawn = "false";
    const tile = await fetchTile(res, l, h, z, x, y);
    if (at.loading !== ticket) return; // a later move won
    if (tile.error) {
      note.textContent = tile.gone
        ? "This input's pass is no longer kept on the server (other inputs took its place): " +
          "compute it again to zoom."
        : tile.error;
      box.dataset.drawn = "error";
      return;
    }
    Object.assign(at, { z, x, y, tile, hovered: null }); // a cell of the last tile means nothing here
    Object.assign(box.dataset, { z, x, y, factor: tile.factor });
    clearPlots(plot);
    const title = `L${l}.H${h}, zoom ${tile.z}/${tile.max_z}`;
    const div = addPlot(plot, tileFigure(res, tile, title), "plot zoom-tile");
    note.textContent = describeTile(tile);
    await div.drawn;
    if (at.loading !== ticket) return; // a later move is drawing its own tile
    div.on("plotly_unhover", () => { at.hovered = null; });
    div.on("plotly_hover", (event) => {
      const point = event.points[0];
      at.hovered = { row: point.y, col: point.x };
    });
    div.addEventListener("wheel", (event) => {
      event.preventDefault();
      zoom(event.deltaY < 0 ? 1 : -1);
    }, { passive: false });
    let down = null;
    div.addEventListener("pointerdown", (event) => { down = [event.clientX, event.clientY]; });
    div.addEventListener("pointerup", (event) => {
      if (down === null) return;
      const [dx, dy] = [event.clientX - down[0], event.clientY - down[1]];
      down = null;
      if (Math.max(Math.abs(dx), Math.abs(dy)) < DRAG_PX) return;
      if (Math.abs(dx) > Math.abs(dy)) move(dx > 0 ? -1 : 1, 0);
      else move(0, dy > 0 ? -1 : 1);
    });
    box.dataset.drawn = "true";
  }

  // One level in (+1, on the hovered cell, else the tile's middle) or out (-1).
  function zoom(step) {
    const tile = at.tile;
    if (tile === null) return;
    const z = at.z + step;
    if (z < 0 || z > tile.max_z) return;
    const span = TILE_SIDE * 2 ** (tile.max_z - z); // tokens a tile covers at level z
    const cell = at.hovered ?? {
      row: Math.floor(tile.weights.length / 2), col: Math.floor((tile.weights[0] || []).length / 2),
    };
    const row = Math.min(tile.rows[1] - 1, tile.rows[0] + cell.row * tile.factor);
    const col = Math.min(tile.cols[1] - 1, tile.cols[0] + cell.col * tile.factor);
    at.hovered = null;
    show(z, Math.floor(col / span), Math.floor(row / span));
  }

  // One tile over (dx columns, dy rows), where there is one.
  function move(dx, dy) {
    const tile = at.tile;
    if (tile === null) return;
    const span = TILE_SIDE * tile.factor;
    const x = at.x + dx;
    const y = at.y + dy;
    if (x < 0 || y < 0 || x * span >= tile.key_length || y * span >= tile.query_length) return;
    show(at.z, x, y);
  }

  const buttons = [
    ["−", "Zoom out", () => zoom(-1)], ["+", "Zoom in", () => zoom(1)],
    ["←", "Earlier keys", () => move(-1, 0)], ["→", "Later keys", () => move(1, 0)],
    ["↑", "Earlier queries", () => move(0, -1)], ["↓", "Later queries", () => move(0, 1)],
  ];
  for (const [text, label, act] of buttons) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "secondary";
    button.textContent = text;
    button.title = label;
    button.setAttribute("aria-label", label);
    button.addEventListener("click", act);
    bar.append(button);
  }
  box.addEventListener("keydown", (event) => {
    const keys = {
      "+": () => zoom(1), "=": () => zoom(1), "-": () => zoom(-1),
      ArrowLeft: () => move(-1, 0), ArrowRight: () => move(1, 0),
      ArrowUp: () => move(0, -1), ArrowDown: () => move(0, 1),
    };
    if (keys[event.key] && event.target === box) {
      event.preventDefault();
      keys[event.key]();
    }
  });
  show(0, 0, 0);
  return box;
}
