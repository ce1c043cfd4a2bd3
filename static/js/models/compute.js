// Computing the form's request (Compute, Enter, another model): the view drawn anew and
// its timings, a refused request's results cleared; a speech or image model computes
// through media.js instead.
import { busy, writeUrlState } from "../api.js";
import { computeMedia, mediaModality } from "../media.js";
import { modelInfo } from "./catalog.js";
import {
  clearError, computeButton, deviceSelect, resultsPane, showError, summary, targetSelect,
} from "./elements.js";
import { populateSelectors, readRequest, updateStale } from "./form.js";
import { waitForModel } from "./listing.js";
import { clearResults, renderView } from "./render.js";
import { state } from "./state.js";

export async function compute() {
  const started = performance.now(); // the timings count from the click (or Enter)
  clearError();
  const request = readRequest();
  const model = modelInfo(request.model) || state.models[0];
  // While the model loads, the form cannot know its family's fields: the link stays.
  if (model.state === "loading") {
    waitForModel(model.name);
    return;
  }
  if (mediaModality(model) && model.state === "ready") { // a file is no link's field
    state.pending = null;
    delete summary.dataset.waiting;
    await computeSpeechOrImage(model);
    return;
  }
  // The link carries this request from now on, also while it is being computed (a tab
  // clicked before the response writes it, not the previous one).
  writeUrlState(request, state.view);
  if (model.state === "failed") {
    clearResults(); // not the results of another model under its error
    showError(`${model.name} failed to load: ${model.error || "no reason given"}`);
    return;
  }
  state.pending = null;
  delete summary.dataset.waiting;
  const run = (state.computes += 1);
  resultsPane.classList.add("running"); // the results on screen are the previous run's
  await busy(async () => {
    state.computing = JSON.stringify(request);
    updateStale();
    state.request = request;
    state.overviewKey = null;
    state.queries = new Map();
    state.queryIndex = null;
    targetSelect.replaceChildren(); // new inputs: the default target (or the link's)
    delete targetSelect.dataset.key;
    populateSelectors(request, model.num_layers);
    state.responseAt = null;
    state.firstLayerAt = null;
    state.gridAt = null;
    try {
      // Refused, it leaves nothing of an earlier run on screen (render.js clearResults).
      await renderView();
    } finally {
      if (run === state.computes) {
        resultsPane.classList.remove("running");
        state.computing = null;
        updateStale();
      }
    }
    if (run !== state.computes) return; // overtaken by a newer Compute
    // Refused (the error is shown), waiting for the model, or a view with no overview.
    if (state.overviewKey === null || state.responseAt === null) return;
    const drawn = performance.now();
    const since = (t) => (t === null ? null : t - started);
    // Milliseconds from the click: to the whole response, to the model view's first row
    // of thumbnails and its whole grid (null in the other views); and from the response's
    // end to the drawn view (the grid and the enlarged map).
    window.attnvizModels.timings = {
      responseMs: since(state.responseAt),
      drawMs: drawn - state.responseAt,
      firstLayerMs: since(state.firstLayerAt),
      wholeGridMs: since(state.gridAt),
    };
  }, "Computing…", computeButton);
}

// A speech or image model: its own inputs and view (media.js); no text request is kept.
async function computeSpeechOrImage(model) {
  state.request = null;
  const label = model.modality === "speech" ? "Transcribing…" : "Computing…";
  await busy(async () => {
    try {
      summary.textContent = await computeMedia(model, deviceSelect.value);
    } catch (error) {
      summary.textContent = ""; // not the summary of what was drawn before
      showError(error.message);
    }
  }, label, computeButton);
}
