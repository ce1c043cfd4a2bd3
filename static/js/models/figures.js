// What the views share around their figures: a map of weights with the page's colour
// scale, a head enlarged (the selection outlined on it), and scrolling a map into sight.
import { busy } from "../api.js";
import { addPlot, clearPlots, heatmapFigure } from "../heatmap.js";
import { outline, selectionShapes } from "../tokens.js";
import { displayTokens } from "../lib/display.js";
import { methodSelect } from "./elements.js";
import { colourMode, valueName } from "./form.js";
import { headTitle, isSelfAttention, keyTokens, queryTokens } from "./response.js";
import { bindSelection } from "./selection.js";
import { state } from "./state.js";
import { methodFigureName } from "./methods.js";
import { headMap } from "./stream.js";

// Narrower than this (px), the model view's columns are numbered 0, 1, ... instead of
// H0, H1, ...: twelve "H10"-wide labels do not fit side by side on a phone.
export const NARROW_GRID = 560;


export function weightFigure(z, rowLabels, colLabels, title, showscale = true, extra = {}) {
  return heatmapFigure({
    z, rowLabels: displayTokens(rowLabels), colLabels: displayTokens(colLabels), title, zmin: 0,
    showscale, valueName: valueName(), scale: colourMode(rowLabels.length), ...extra,
  });
}

export async function showEnlarged(container, res, l, h) {
  const z = await busy(() => headMap(res, l, h));
  if (z === null) return;
  clearPlots(container);
  container.dataset.layer = String(l);
  container.dataset.head = String(h);
  const div = addPlot(container, weightFigure(z, queryTokens(res), keyTokens(res),
    headTitle(res, l, h)), "plot enlarged-plot");
  await div.drawn;
  bindSelection(div);
  if (state.selected.size) {
    await outline(div, selectionShapes(state.selected, {
      rows: z.length, cols: (z[0] || []).length,
    }, isSelfAttention(res)));
  }
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
