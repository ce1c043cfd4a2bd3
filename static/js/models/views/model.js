// The model view (BertViz's): every layer's and head's map as thumbnails in one figure,
// painted layer by layer as the overview streams; a click enlarges a head below, and
// with the method head_importance, the layers × heads grid of its importance.
import { addPlot, clearPlots, heatmapFigure, thumbnailPreview, tiledGrid } from "../../heatmap.js";
import { displayNote, importanceBox, resultsPane, summary, tokenBox } from "../elements.js";
import { NARROW_GRID, reveal, showEnlarged } from "../figures.js";
import { GRADIENT_FORMAT } from "../methods.js";
import { colourMode, valueName } from "../form.js";
import { SCALE_NOTES, addHint, describe, noteFor, targetText } from "../notes.js";
import { headName, keyTokens, kvGroups, poolFactors, queryTokens, thumbnailHover } from "../response.js";
import { shadeBy } from "../selection.js";
import { describeGrid, firstHead, markAblated } from "../heads.js";
import { state } from "../state.js";

// The model view's thumbnails on a narrow screen (modelGrid): at least MIN_THUMB_PX wide
// (the grid scrolls sideways beyond), square below SQUARE_THUMB_PX; GRID_FRAME_PX is
// what the row titles and the colour bar take.
const MIN_THUMB_PX = 36;
const SQUARE_THUMB_PX = 60;
const GRID_FRAME_PX = 180;

// The model view's hint and its grid's thumbnailGrid options (the cells read
// res.attentions when drawn; a stand-in of the grid reads none of them).
function modelGrid(res, body, enlarged) {
  const narrow = body.clientWidth < NARROW_GRID;
  const groups = kvGroups(res);
  const H = res.num_heads;
  // A phone's width shared by 12 heads gives 17 px slivers: the thumbnails keep
  // MIN_THUMB_PX and the grid scrolls sideways in its box instead (the page does not);
  // their rows then as tall as they are wide, not 70 px.
  const thumb = (body.clientWidth - GRID_FRAME_PX) / (H * 1.06); // 6% gaps
  const squeezed = thumb < SQUARE_THUMB_PX;
  const side = Math.max(MIN_THUMB_PX, thumb);
  body.closest(".view").style.setProperty("--grid-min-width",
    thumb < MIN_THUMB_PX ? `${Math.ceil(H * 1.06 * MIN_THUMB_PX + GRID_FRAME_PX)}px` : "0px");
  const scale = colourMode(queryTokens(res).length);
  let hint = `Rows are layers (L0–L${res.num_layers - 1}), columns heads ` +
    `(${narrow ? "" : "H"}0–${narrow ? "" : "H"}${H - 1}); the thumbnails are ` +
    `${SCALE_NOTES[scale]}. Click one to enlarge it below.`;
  // A phone: the grid is wider than the screen; the hint and a shadow at the right edge
  // (.scrolls-sideways) say there is more of it.
  const scrolls = thumb < MIN_THUMB_PX;
  body.classList.toggle("scrolls-sideways", scrolls);
  if (scrolls) hint += ` Wider than this screen: swipe the grid sideways for all ${H} heads →`;
  if (groups) {
    hint += ` Grouped-query attention: the ${H} query heads share ${groups.kv} key/value ` +
      `heads, ${groups.per} each (heads 0–${groups.per - 1} read key/value head 0, and so ` +
      "on); dotted lines part the groups.";
  }
  const wideGroups = groups && body.clientWidth / groups.kv >= 150;
  const options = {
    rows: res.num_layers,
    cols: H,
    ...(squeezed ? { height: Math.round(60 + res.num_layers * side * 1.15) } : {}),
    cell: (l, h) => res.attentions[l][0][h],
    rowName: "L",
    colName: narrow ? "" : "H",
    title: "Layers × heads",
    scale,
    valueName: valueName(),
    hover: (l, h) => headName(res, l, h),
    queryHover: thumbnailHover(res, "query"),
    keyHover: thumbnailHover(res, "key"),
    colGroup: groups ? groups.per : 0,
    groupLabel: (g) => (wideGroups ? `key/value head ${g}` : `kv ${g}`),
    onClick: async (l, h) => {
      shadeBy(res, l, h); // the token strip's shading follows the enlarged head
      await showEnlarged(enlarged, res, l, h);
      reveal(enlarged); // below a tall grid (30 layers) it is out of sight: bring it up
    },
  };
  return { hint, options, kvHeads: groups ? groups.kv : H };
}

// The model view's watcher of a streamed overview (see overview): at the stream's start
// it lays out a stand-in of the grid (thumbnailPreview: the figure's size, blank
// thumbnails), then paints each layer's row as it comes, the rows of one animation frame
// together (a timer too: a background tab gets no frames). renderModelView then draws the
// figure under it. #view-model gets data-first-layer="true" once layer 0's row is painted.
export function modelWatcher(section, ticket) {
  const body = section.querySelector(".view-body");
  const watcher = {
    stream: null, preview: null, box: null, queue: [], frame: null, timer: null,
    current: () => ticket === state.ticket && state.view === "model",
    start(stream) {
      if (!watcher.current()) return;
      watcher.stop();
      watcher.stream = stream;
      resultsPane.classList.remove("running"); // the new input's grid replaces the old
      // Its tokens replace the strip once the overview is whole: no grid under another
      // input's tokens meanwhile.
      const tokens = JSON.stringify([queryTokens(stream.res), keyTokens(stream.res)]);
      if (tokens !== state.selectionTokens) tokenBox.hidden = true;
      // What is known of the new input before its maps: the text above the grid.
      const known = {
        ...stream.res, shape: [stream.total, 1, stream.res.num_heads], computing: true,
      };
      summary.textContent = describe(known);
      displayNote.textContent = noteFor(known);
      // The width is read before the old grid goes: the page does not shrink meanwhile.
      const { hint, options } = modelGrid(stream.res, body, null);
      clearPlots(body);
      addHint(body, hint);
      watcher.box = document.createElement("div");
      watcher.box.className = "grid-box";
      body.append(watcher.box);
      watcher.preview = thumbnailPreview(watcher.box, options);
    },
    layer(stream, l) {
      if (!watcher.current() || stream !== watcher.stream) return;
      watcher.queue.push(l);
      if (watcher.frame === null) {
        watcher.frame = requestAnimationFrame(watcher.flush);
        watcher.timer = setTimeout(watcher.flush, 100);
      }
    },
    flush() {
      const rows = watcher.queue;
      watcher.stop();
      if (!watcher.current() || !rows.length) return;
      for (const l of rows) watcher.preview.fillRow(l, watcher.stream.res.attentions[l][0]);
      if (section.dataset.firstLayer !== "true") {
        section.dataset.firstLayer = "true";
        state.firstLayerAt = performance.now();
      }
    },
    stop() {
      cancelAnimationFrame(watcher.frame);
      clearTimeout(watcher.timer);
      watcher.frame = null;
      watcher.queue = [];
    },
  };
  return watcher;
}

// Resolves once the page has been painted (a frame, then a task); after 100 ms at most, as
// a background tab gets no frames.
function nextFrame() {
  return new Promise((resolve) => {
    requestAnimationFrame(() => setTimeout(resolve, 0));
    setTimeout(resolve, 100);
  });
}

// BertViz's model view: N x H thumbnails in one figure; a click enlarges one. With
// grouped-query attention the heads sharing a key/value head are set apart. A streamed
// response's figure is drawn under its stand-in (`watcher`'s), which goes once it is drawn.
export async function renderModelView(section, res, watcher = null) {
  const body = section.querySelector(".view-body");
  const enlarged = section.querySelector(".enlarged");
  const { hint, options, kvHeads } = modelGrid(res, body, enlarged);
  let container = body;
  let preview = null;
  if (watcher && watcher.preview && watcher.stream.final === res && watcher.box.isConnected) {
    // The rows still queued, and "Drawing the grid…", are shown before Plotly's draw, which
    // holds the page for a while (a fast stream's lines can all come before any frame).
    watcher.flush();
    await nextFrame();
    if (!watcher.current()) return;
    preview = watcher.preview;
    container = watcher.box;
    preview.cover();
  } else {
    clearPlots(body);
    addHint(body, hint);
  }
  const grid = tiledGrid(container, options);
  grid.id = "model-grid";
  grid.dataset.kvHeads = String(kvHeads);
  const gridDrawn = grid.drawn.then(() => {
    if (preview) preview.remove();
    if (watcher && !watcher.current()) return; // a newer input's stream owns the timings
    state.gridAt = performance.now();
    if (section.dataset.firstLayer !== "true") {
      section.dataset.firstLayer = "true";
      state.firstLayerAt = state.gridAt;
    }
  });
  // The enlarged head is fetched once the grid is drawn: its computation on the server
  // and its decoding here would otherwise share the CPU with the grid's drawing.
  await gridDrawn;
  await markAblated(grid, res);
  const [factor, keyFactor] = poolFactors(res.downsample);
  const maps = [];
  for (let l = 0; l < res.num_layers; l += 1) {
    for (let h = 0; h < res.num_heads; h += 1) maps.push([`L${l}.H${h}`, res.attentions[l][0][h]]);
  }
  describeGrid(grid, res, maps, `Layers × heads of ${res.model}`, { factor, keyFactor });
  await showImportance(importanceBox, res, enlarged);
  const [l, h] = firstHead(res, [0, 0]);
  if (l !== 0 || h !== 0) shadeBy(res, l, h);
  await showEnlarged(enlarged, res, l, h);
}

// Head importance (method head_importance): the layers × heads grid under the thumbnails,
// in their rows and columns; a click enlarges that head.
async function showImportance(container, res, enlarged) {
  clearPlots(container);
  if (!res.head_importance) return;
  const rows = res.head_importance.map((_, l) => `L${l}`);
  const cols = res.head_importance[0].map((_, h) => `H${h}`);
  addHint(container, `${targetText(res)} Each cell is |∂T/∂ξ| for that head's gate ` +
    "(Michel et al. 2019): how much the target would move if the head were switched off.");
  const figure = heatmapFigure({
    z: res.head_importance, rowLabels: rows, colLabels: cols, zmin: 0,
    title: "Head importance |∂T/∂ξ| (Michel et al. 2019)", yTitle: "Layer", xTitle: "Head",
    ...GRADIENT_FORMAT, valueName: "|∂T/∂ξ|",
  });
  // About 22 px a layer (30 for SmolLM2), the figure's own height.
  const height = Math.round(Math.max(330, 150 + rows.length * 22));
  figure.layout.height = height;
  const div = addPlot(container, figure, "plot importance-plot");
  div.style.height = `${height}px`;
  div.dataset.map = "head-importance";
  await div.drawn;
  div.on("plotly_click", (event) => {
    const point = event.points[0];
    showEnlarged(enlarged, res, Number(point.y), Number(point.x));
  });
}
