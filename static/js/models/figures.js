// What the views share around their figures: a map of weights with the page's colour
// scale, a head enlarged (the selection outlined on it), and scrolling a map into sight.
import { busy } from "../api.js";
import { addPlot, clearPlots, heatmapFigure, tokenHover } from "../heatmap.js";
import { displayTokens } from "../lib/display.js";
import { methodSelect } from "./elements.js";
import { colourMode, valueName } from "./form.js";
import { blockLabels, headTitle, keyTokens, queryTokens } from "./response.js";
import { bindSelection, outlineMap } from "./selection.js";
import { state } from "./state.js";
import { methodFigureName } from "./methods.js";
import { headMap } from "./stream.js";
import { describeMap, rememberHead } from "./heads.js";
import { addZoom } from "./zoom.js";

// Narrower than this (px), the model view's columns are numbered 0, 1, ... instead of
// H0, H1, ...: twelve "H10"-wide labels do not fit side by side on a phone.
export const NARROW_GRID = 560;

// A map of `res`'s input, {z: P_q x P_k, factor, keyFactor} (tokens per row and column: 1
// at full resolution, more when block-max pooled), as a weight figure whose rows and
// columns are labelled with the tokens or the blocks they cover ("tokens 8–15: the…mat").
export function mapFigure(res, map, title, extra = {}) {
  const { factor = 1, keyFactor = 1, first = 0 } = map;
  const axis = (tokens, f) => {
    const shown = displayTokens(tokens.slice(first)); // a window's (map.first: its start)
    const labels = blockLabels(shown, f);
    return { labels, hover: tokenHover(labels, f, shown.length) };
  };
  const rows = axis(queryTokens(res), factor);
  const cols = axis(keyTokens(res), keyFactor);
  return heatmapFigure({
    z: map.z, rowLabels: rows.labels, colLabels: cols.labels, title, zmin: 0,
    valueName: valueName(), scale: colourMode(rows.labels.length),
    rowHover: rows.hover, colHover: cols.hover, ...extra,
  });
}

// mapFigure drawn in `container` (addPlot), its div marked with the map's factors
// (data-factor, data-key-factor): the selection's outlines and a click on a row read them.
// A text alternative describes it (heads.js describeMap: its largest weights as a table).
export function addMap(container, res, map, title, className, extra = {}) {
  const div = addPlot(container, mapFigure(res, map, title, extra), className);
  div.dataset.factor = String(map.factor ?? 1);
  div.dataset.keyFactor = String(map.keyFactor ?? 1);
  if (map.first) div.dataset.first = String(map.first);
  describeMap(div, res, map, title);
  return div;
}

// Head h of layer l enlarged in `container` (MAP_SIDES.head per side at most: a longer
// input's comes pooled, with a note), the selection outlined on it. The link and the
// downloads name it at once, before its map comes (a long input's is a request of its
// own); a map overtaken meanwhile by another choice (a click, Go to head) or another
// drawing is left out, so that what they name is what is drawn last.
export async function showEnlarged(container, res, l, h) {
  const ticket = state.ticket;
  rememberHead(l, h);
  const map = await busy(() => headMap(res, l, h));
  const [chosenLayer, chosenHead] = state.enlargedHead;
  if (map === null || ticket !== state.ticket || chosenLayer !== l || chosenHead !== h) return;
  clearPlots(container);
  container.dataset.layer = String(l);
  container.dataset.head = String(h);
  const pooled = map.factor > 1 || map.keyFactor > 1;
  const title = headTitle(res, l, h) + (pooled ? `, block max of ${map.factor} × ${map.keyFactor} tokens` : "");
  const div = addMap(container, res, map, title, "plot enlarged-plot");
  await div.drawn;
  bindSelection(div);
  await outlineMap(div, res);
  // A pooled head of an input whose pass the server kept: zoom in to single tokens, tile
  // by tile (zoom.js), with no L x L numbers on the page.
  if (pooled && res.pass_key) addZoom(container, res, l, h);
}

// The chosen method's own map (head importance, gradient rollout, flow, value zeroing; for
// a per-head method, the open view) scrolled into sight when it is not wholly in it.
export function revealMethod() {
  const name = methodFigureName(methodSelect.value);
  const section = document.getElementById(`view-${state.view}`);
  const target = section.querySelector(`[data-map="${name}"]`) ||
    section.querySelector(".view-body");
  reveal(target);
}

// Scroll `element` into sight unless it is wholly in it (a tall one: its top).
export function reveal(element) {
  if (!element) return;
  const box = element.getBoundingClientRect();
  if (box.top >= 0 && box.bottom <= window.innerHeight) return;
  element.scrollIntoView({ block: box.height > window.innerHeight ? "start" : "nearest" });
}
