// The model list and the models' loading: the picker's options, polling while a model
// loads (a computation waiting for it resumes), and the attention requests, whose
// refusal of a model still loading waits for it.
import { jsonFetcher, option } from "../api.js";
import { descriptionOf, modelInfo, optionText, selectedModel } from "./catalog.js";
import {
  controls, displayNote, modelDescription, modelSelect, pathNote, showError, summary,
} from "./elements.js";
import { adaptInputs, fillOptions } from "./form.js";
import { page, state } from "./state.js";

const ATTENTION_URL = "/api/v1/models/attention";
export const MODELS_URL = "/api/v1/models";
const POLL_MS = 1500; // how often the model list is asked again while a model loads

// The model picker: one option per model, disabled until it is ready.
function refreshOptions() {
  const current = modelSelect.value;
  for (const m of state.models) {
    let element = [...modelSelect.options].find((o) => o.value === m.name);
    if (!element) {
      element = option(m.name, m.name);
      modelSelect.append(element);
    }
    element.textContent = optionText(m);
    element.disabled = m.state !== "ready";
    element.dataset.state = m.state;
  }
  if (current) modelSelect.value = current;
}

export function describeModel() {
  const m = selectedModel();
  modelDescription.textContent = descriptionOf(m);
  modelDescription.dataset.state = m ? m.state : "";
  // A family whose attention modules bypass transformers' attention interface (GPT-Neo,
  // BLOOM) is drawn from its own output_attentions: say so, and what that costs.
  const own = m && m.attention_path === "output_attentions";
  pathNote.hidden = !own;
  pathNote.textContent = own ? `${m.attention_note}.` : "";
}

export function applyListing(listing) {
  state.listing = listing;
  state.models = listing.models;
  refreshOptions();
  describeModel();
  // The chosen model has just become ready: its family's inputs and defaults, and the
  // options of a link that names it (unknown while it was loading).
  const m = selectedModel();
  const fresh = m && m.state === "ready" && state.adaptedFor !== m.name;
  adaptInputs(fresh);
  if (fresh && state.link && state.link.model === m.name) fillOptions(state.link);
}

async function fetchListing() {
  try {
    const response = await fetch(MODELS_URL);
    if (!response.ok) return null;
    return await response.json();
  } catch {
    return null; // the next poll tries again
  }
}

// Ask for the model list every POLL_MS while a model loads; a computation waiting for
// one starts once it is ready.
export function pollModels() {
  if (state.pollTimer !== null) return;
  state.pollTimer = setTimeout(async () => {
    const listing = await fetchListing();
    state.pollTimer = null;
    if (listing) {
      applyListing(listing);
      resumePending();
    }
    if (!listing || listing.loading || (state.pending && modelInfo(state.pending)?.state === "loading")) {
      pollModels();
    }
  }, POLL_MS);
}

// The chosen model is still loading: say so (no error), and compute once it is ready.
export function waitForModel(name) {
  state.pending = name;
  controls.hidden = state.request === null; // nothing to choose from before a first view
  summary.textContent = `${name} is loading; the view appears when it is ready.`;
  summary.dataset.waiting = name;
  displayNote.textContent = "";
  pollModels();
}

function resumePending() {
  const name = state.pending;
  if (!name) return;
  const m = modelInfo(name);
  if (!m || m.state === "loading") return;
  state.pending = null;
  delete summary.dataset.waiting;
  if (modelSelect.value !== name) return; // another model was chosen meanwhile
  if (m.state === "failed") {
    summary.textContent = `${name} failed to load.`;
    showError(`${name} failed to load: ${m.error || "no reason given"}`);
    return;
  }
  page.compute();
}

// POST to the attention endpoint. A model still loading (503, type "loading") is not an
// error: the page waits for it (waitForModel) and the result is null, as it is after an
// error, which is then shown in the error box.
export async function requestAttention(body) {
  let message = null;
  const res = await jsonFetcher((text) => { message = text; })(ATTENTION_URL, body);
  state.answeredAt = performance.now();
  if (res !== null) return res;
  await refused(body.model, message);
  return null;
}

// The API refused a request for `model` with `message`: a model still loading waits
// (waitForModel), anything else is shown in the error box.
export async function refused(model, message) {
  const listing = await fetchListing();
  if (listing) applyListing(listing);
  const m = modelInfo(model);
  if (m && m.state === "loading") {
    waitForModel(m.name);
    return;
  }
  showError(message);
}
