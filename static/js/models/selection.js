// Token selection (tokens.js) in the model, layer and averages views: the token strip,
// shaded by the selection's weights, and the selection's outlines on the maps. Positions
// count the shown tokens (after "hide special tokens"); pooled maps outline the block.
import { linkedTokens, selectedIndex, writeLinkSettings } from "../api.js";
import {
  additive, fillHeadChoice, focusToken, nextSelection, outline, selectionShapes, shadedWeights,
  tokenStrip,
} from "../tokens.js";
import { displayTokens } from "../lib/display.js";
import { keyStrip, layerSelect, queryStrip, shadeHead, shadeLayer, tokenBox } from "./elements.js";
import { isSelfAttention, keyTokens, poolFactors, queryTokens } from "./response.js";
import { page, state } from "./state.js";

// The selection's outlines on one drawn map of `res`'s input (a .head-plot or an
// .enlarged-plot), pooled as its div's data-factor and data-key-factor say (addMap).
export function outlineMap(div, res) {
  if (!div.layout) return Promise.resolve();
  const [z] = [div.data[0].z];
  const box = { rows: z.length, cols: (z[0] || []).length };
  // A map of a window of the input (data-first: its first position) outlines its own rows.
  const first = Number(div.dataset.first || 0);
  const positions = [...state.selected].map((q) => q - first).filter((q) => q >= 0);
  return outline(div, selectionShapes(positions, box, isSelfAttention(res),
    Number(div.dataset.factor || 1), Number(div.dataset.keyFactor || 1)));
}

// The selection's outlines on every map of the open view's section.
export function outlineView(section, res) {
  const done = [...section.querySelectorAll(".head-plot, .enlarged-plot")].map(
    (div) => outlineMap(div, res));
  const grid = section.querySelector("#model-grid");
  if (grid && grid.tiles && grid.layout) {
    const { tiles } = grid;
    const [fq, fk] = poolFactors(res.downsample);
    const shapes = [];
    for (let r = 0; r < tiles.rows; r += 1) {
      for (let c = 0; c < tiles.cols; c += 1) {
        // Rows only: columns too would clutter hundreds of thumbnails (the enlarged map
        // has both).
        shapes.push(...selectionShapes(state.selected, {
          x: tiles.x[c], y: tiles.y[r], rows: tiles.height, cols: tiles.width,
        }, false, fq, fk));
      }
    }
    done.push(outline(grid, shapes));
  }
  return Promise.all(done);
}

// The weight each shown key token gets from the selection in layer l (null: nothing
// selected): from the head mean or the head #shade-head names. A pooled overview (long
// inputs) gives each token its block's pooled weight, with no second request.
function selectionWeights(res, l) {
  if (!state.selected.size) return null;
  const [fq, fk] = poolFactors(res.downsample);
  const blocks = shadedWeights(res.attentions[l][0], state.selected, shadeHead.value, fq);
  if (fk === 1) return blocks;
  return keyTokens(res).map((_, j) => blocks[Math.floor(j / fk)] ?? 0);
}

// The token strip: the shown tokens, shaded by the selection's weights in the layer of
// the layer selector (selectionWeights).
export function renderTokens(res) {
  const l = selectedIndex(layerSelect);
  shadeLayer.textContent = String(l);
  if (shadeHead.options.length !== res.num_heads + 1) fillHeadChoice(shadeHead, res.num_heads);
  const weights = selectionWeights(res, l);
  const self = isSelfAttention(res);
  tokenStrip(queryStrip, displayTokens(queryTokens(res)), {
    selected: state.selected, weights: self ? weights : null,
    label: self ? "Tokens" : "Queries (decoder tokens)", onSelect: selectToken,
  });
  keyStrip.hidden = self;
  if (!self) {
    tokenStrip(keyStrip, displayTokens(keyTokens(res)), {
      weights, label: "Keys (encoder tokens), shaded by the selected queries' weights",
      onSelect: () => {},
    });
  }
  queryStrip.dataset.selected = [...state.selected].sort((x, y) => x - y).join(",");
}

// The strip shaded by head h of layer l (the one just enlarged); layer l is then the
// layer the layer-based views open on.
export function shadeBy(res, l, h) {
  layerSelect.value = String(l);
  if (shadeHead.options.length !== res.num_heads + 1) fillHeadChoice(shadeHead, res.num_heads);
  shadeHead.value = String(h);
  renderTokens(res);
  writeLinkSettings(state.view);
}

// The token box of the overview `res` (a new input clears the selection), shown before
// the view is drawn.
export function showTokenBox(res) {
  tokenBox.hidden = false;
  const key = JSON.stringify([queryTokens(res), keyTokens(res)]);
  if (key !== state.selectionTokens) {
    // A link's selection applies to its first input, where it has those rows.
    const linked = [...linkedTokens(state.linked.tokens)];
    const rows = queryTokens(res).length;
    state.selected = new Set(linked.every((q) => q < rows) ? linked : []);
    delete state.linked.tokens;
    state.selectionTokens = key;
  }
  renderTokens(res);
}

// Position q was chosen (null: clear) in the strip or on a map; `add`: shift-click.
export async function selectToken(q, add = false, fromKeyboard = false) {
  const res = state.overview;
  if (!res || !page.views[state.view].overview) return;
  state.selected = q === null ? new Set() : nextSelection(state.selected, q, add);
  const section = document.getElementById(`view-${state.view}`);
  renderTokens(res);
  if (fromKeyboard && q !== null) focusToken(queryStrip, q);
  await outlineView(section, res);
  section.dataset.selected = queryStrip.dataset.selected;
  writeLinkSettings(state.view);
}

// A click on a map's cell selects its query row (on a pooled map, data-factor > 1, the
// first token of its block).
export function bindSelection(div) {
  div.on("plotly_click", (event) => {
    const point = event.points && event.points[0];
    if (!point || !Number.isInteger(point.y)) return;
    const first = Number(div.dataset.first || 0);
    selectToken(first + point.y * Number(div.dataset.factor || 1), additive(event.event));
  });
}
