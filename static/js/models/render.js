// Drawing the open view (VIEWS) of the computed request: the overview first for the views
// drawn from it, the token strip, the text around the maps and the selection's outlines.
import { busy, fillIndexSelect, openTab, selectedIndex, writeLinkSettings } from "../api.js";
import { clearPlots } from "../heatmap.js";
import {
  clearError, controls, displayNote, errorElement, headJumpControl, hideSpecialControl,
  importanceBox, layerControl, layerSelect, queryStrip, summary, tokenBox,
} from "./elements.js";
import { fillTargets, updateStale } from "./form.js";
import { describe, noteFor, showAblation } from "./notes.js";
import { labelNumbers } from "./numbers.js";
import { drawImageAttention } from "./prompt_image.js";
import { outlineView, showTokenBox } from "./selection.js";
import { state } from "./state.js";
import { layerProgress, overview } from "./stream.js";
import { VIEWS } from "./views.js";

// Draws the open view of state.request; resolves to true once drawn, false when refused or
// waiting for the model, null when overtaken by a newer drawing (a tab clicked meanwhile).
export async function renderView() {
  if (!state.request) return false;
  const ticket = (state.ticket += 1);
  state.queryTicket += 1;
  clearError(); // an error belongs to the view or input it came from
  controls.hidden = false;
  const section = document.getElementById(`view-${state.view}`);
  section.dataset.drawn = "false";
  const started = performance.now();
  state.shownAt = null;
  const view = VIEWS[state.view];
  const watcher = view.streamed ? view.streamed(section, ticket) : null;
  if (watcher) section.dataset.firstLayer = "false";
  openTab(state.view);
  writeLinkSettings(state.view);
  layerControl.hidden = !view.layerControl;
  headJumpControl.hidden = !view.layerControl && state.view !== "model";
  hideSpecialControl.hidden = !view.hideSpecial;
  controls.dataset.view = state.view; // the atlas keeps only the downloads (CSS)
  const generating = state.request.max_new_tokens > 0;
  const label = view.busyLabel ?? (generating ? "Generating and computing…" : "Computing…");
  const done = await busy(async () => {
    if (view.ownTokens) tokenBox.hidden = true;
    if (!view.overview) return view.render(section, { ticket });
    try {
      return await renderOverview(section, ticket, watcher);
    } finally {
      // The streamed grid's progress ends with its drawing (or when this draws nothing).
      if (watcher && watcher.stream) layerProgress.end(watcher.stream);
    }
  }, label);
  if (ticket !== state.ticket) return null;
  // Refused (the error says why; a model still loading is waited for): no maps of an
  // earlier request stay under the error, as after a refused Compute.
  const refused = !done || !errorElement.hidden;
  if (refused && state.pending === null) clearResults();
  if (refused) return false;
  // What is on screen now is state.request's (the Compute's, or a tab's drawing of it).
  state.shown = JSON.stringify(state.request);
  updateStale();
  writeLinkSettings(state.view); // a link's selection is applied once its tokens are shown
  // Milliseconds: the view's drawing after its last answer arrived (from the switch when
  // it needed none): drawMs of the maps on screen (the layer view draws the others after
  // them), allDrawnMs of every map.
  const drawn = performance.now();
  const received = Math.max(started, state.answeredAt ?? started);
  const shown = Math.min(state.shownAt ?? drawn, drawn);
  window.attnvizModels.viewTimings = {
    view: state.view,
    fetchMs: received - started,
    drawMs: Math.max(0, shown - received),
    allDrawnMs: drawn - received,
  };
  section.dataset.drawn = "true";
  labelNumbers();
  drawImageAttention(); // a vision-language prompt's image, under its own panel
  return true;
}

// After a refused Compute or view nothing of an earlier run stays on screen: the views, the
// token strip and the summary are emptied (the error box says why).
export function clearResults() {
  state.shown = null;
  document.getElementById("image-attention").hidden = true;
  state.overview = null;
  state.overviewKey = null;
  state.overviewRequest = null;
  for (const container of document.querySelectorAll(
    ".results .view .view-body, .results .importance, .results .enlarged")) {
    clearPlots(container);
  }
  document.querySelectorAll(".results .view").forEach((section) => {
    section.dataset.drawn = "false";
  });
  tokenBox.hidden = true;
  summary.textContent = "";
  displayNote.textContent = "";
  showAblation(null);
  updateStale();
  labelNumbers();
}

// The model, layer and averages views: the overview, then the view.
async function renderOverview(section, ticket, watcher) {
  const res = await overview(watcher);
  if (res === null || ticket !== state.ticket) return false;
  clearError();
  if (layerSelect.options.length !== res.num_layers) {
    fillIndexSelect(layerSelect, Array.from({ length: res.num_layers }, (_, l) => `Layer ${l}`));
  }
  summary.textContent = describe(res);
  displayNote.textContent = noteFor(res);
  showAblation(res);
  fillTargets(res);
  if (state.view !== "model") clearPlots(importanceBox);
  const l = selectedIndex(layerSelect);
  // The token strip first: shown after the drawing, it would move the page under it.
  const view = VIEWS[state.view];
  if (!view.ownTokens) showTokenBox(res);
  await view.render(section, { res, layer: l, watcher, ticket });
  if (ticket === state.ticket) await showSelection(section, res);
  return true;
}

// The selection's outlines on the open view, once it is drawn (the maps of the
// selected input: the model, layer and averages views).
async function showSelection(section, res) {
  if (VIEWS[state.view].outlined) await outlineView(section, res);
  section.dataset.selected = queryStrip.dataset.selected;
}
