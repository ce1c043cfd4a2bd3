// The layer view: every head of the selected layer at once, compact; a click enlarges one.
import { clearPlots, thumbnailGrid } from "../../heatmap.js";
import { NARROW_GRID, reveal, showEnlarged } from "../figures.js";
import { colourMode, valueName } from "../form.js";
import { SCALE_NOTES, addHint } from "../notes.js";
import { headName, kvGroups, queryTokens, thumbnailHover } from "../response.js";
import { shadeBy } from "../selection.js";
import { state } from "../state.js";
import { MAP_SIDES, layerMaps } from "../stream.js";
import { describeGrid, firstHead } from "../heads.js";

// Every head of one layer at once, compact (CircuitsVis's attention_patterns): one figure of
// small maps on one colour scale, a row per key/value head with grouped-query attention
// (its query heads side by side), else rows of up to 6 heads (3 on a phone); a click
// enlarges a head below with its tokens (the selection is outlined there). Inputs over
// MAP_SIDES.layer tokens come block-max pooled to it (a map is 170 px at most).
const LAYER_COLUMNS = 6;
const LAYER_CELL_PX = { min: 70, max: 170 }; // a map's side in the compact grid

export async function renderLayerView(section, res, l) {
  const ticket = state.ticket;
  const body = section.querySelector(".view-body");
  const enlarged = section.querySelector(".enlarged");
  const maps = await layerMaps(res, l, MAP_SIDES.layer);
  if (maps === null || ticket !== state.ticket) return;
  clearPlots(body);
  const H = res.num_heads;
  const narrow = body.clientWidth < NARROW_GRID;
  const groups = kvGroups(res);
  const byGroup = Boolean(groups) && groups.per <= (narrow ? 4 : 9);
  const cols = byGroup ? groups.per
    : Math.ceil(H / Math.ceil(H / (narrow ? LAYER_COLUMNS / 2 : LAYER_COLUMNS)));
  const rows = Math.ceil(H / cols);
  const head = (r, c) => r * cols + c;
  const scale = colourMode(queryTokens(res).length);
  const factors = [maps.factor, maps.keyFactor];
  const pooled = maps.factor > 1 || maps.keyFactor > 1;
  // Square maps: the width left beside the titles and the colour bar, shared by the columns.
  const side = Math.max(LAYER_CELL_PX.min,
    Math.min(LAYER_CELL_PX.max, (body.clientWidth - 150) / (cols * 1.06)));
  addHint(body, `All ${H} heads of layer ${l}, ${SCALE_NOTES[scale]} (one colour bar). ` +
    "Hover a map for its weights; click one to enlarge it below with its tokens." +
    (byGroup ? ` Grouped-query attention: a row per key/value head, its ${groups.per} ` +
      "query heads side by side." : "") +
    (pooled ? ` Each map is pooled to blocks of ${maps.factor} × ${maps.keyFactor} tokens ` +
      "(the largest weight of each block); the enlarged head has more detail." : ""));
  const grid = thumbnailGrid(body, {
    rows, cols, count: H,
    cell: (r, c) => maps.attentions[head(r, c)],
    rowName: byGroup ? "kv " : "",
    colName: "",
    cellTitle: (r, c) => `H${head(r, c)}`,
    title: `Layer ${l}: ${H} heads`,
    scale,
    valueName: valueName(),
    height: Math.round(70 + rows * side * 1.3),
    hover: (r, c) => headName(res, l, head(r, c)),
    queryHover: thumbnailHover(res, "query", factors),
    keyHover: thumbnailHover(res, "key", factors),
    onClick: async (r, c) => {
      state.layerHead = head(r, c);
      shadeBy(res, l, state.layerHead);
      await showEnlarged(enlarged, res, l, state.layerHead);
      reveal(enlarged);
    },
  });
  grid.id = "layer-grid";
  const heads = Array.from({ length: H }, (_, h) => [`L${l}.H${h}`, maps.attentions[h]]);
  describeGrid(grid, res, heads, `Layer ${l}: ${H} heads`,
    { factor: maps.factor, keyFactor: maps.keyFactor });
  await grid.drawn;
  if (ticket !== state.ticket) return; // another layer or view was asked for meanwhile
  state.shownAt = performance.now();
  const [first, h] = firstHead(res, [l, state.layerHead < H ? state.layerHead : 0]);
  state.layerHead = first === l ? h : 0;
  await showEnlarged(enlarged, res, l, state.layerHead);
}
