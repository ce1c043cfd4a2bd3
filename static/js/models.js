// AttnViz pretrained-model page: typed text through a real transformer (an encoder
// such as BERT, a decoder LLM such as SmolLM2, or an encoder-decoder); every layer's
// and head's attention (BertViz's model view), one layer's heads, the averages and
// attention rollout, and a token explorer: one token's row in every layer and head, and
// for decoders the generated tokens and the next-token candidates.
//
// This module starts the page and binds its controls; the rest is under models/: the
// page state (state.js), the form, the streamed overview, the notes, and one module per
// view (views/, their table in views.js).
import {
  MODELS_LINK_FIELDS, bindDownloads, bindLinkSettings, bindTabs, jsonFetcher, openTab,
  readUrlRequest, selectLinked, settingsFromUrl, viewFromUrl, writeUrlState,
} from "./api.js";
import { fillColourScales } from "./heatmap.js";
import { bindMedia, mediaModality } from "./media.js";
import { modelInfo, selectedModel } from "./models/catalog.js";
import { compute } from "./models/compute.js";
import {
  ablateInput, blockSelect, colourScale, compareHead, compareModel, compareSentence,
  computeButton, form, hideSpecial, layerSelect, mediaElements, mergeWords, methodSelect,
  modelSelect, neuronHead, oneTextBox, refreshButton, restoreHeads, sequenceSelect, shadeHead,
  showError, summary, targetSelect, textsBox,
} from "./models/elements.js";
import { revealMethod } from "./models/figures.js";
import {
  METHOD_VIEWS, ablatedHeads, adaptInputs, describeInputs, fillForm, gradientMethod, otherMethod,
  updateStale,
} from "./models/form.js";
import { MODELS_URL, applyListing, describeModel, pollModels } from "./models/listing.js";
import { showMethod } from "./models/notes.js";
import { clearResults, renderView } from "./models/render.js";
import { renderTokens, selectToken } from "./models/selection.js";
import { page, state } from "./models/state.js";
import { VIEWS } from "./models/views.js";
import { bindHeadJump, headSetting } from "./models/heads.js";
import { bindNumbers } from "./models/numbers.js";
import { bindAtlas } from "./models/views/atlas.js";
import { bindPromptImage } from "./models/prompt_image.js";
import { queryRequest, selectQuery } from "./models/views/generation.js";

async function start() {
  const listing = await jsonFetcher(showError)(MODELS_URL);
  if (!listing) return;
  if (!listing.models.length) {
    summary.textContent = listing.install_hint;
    showError(listing.install_hint);
    computeButton.disabled = true;
    return;
  }
  applyListing(listing);
  if (listing.loading) pollModels();
  const shared = await readUrlRequest(MODELS_LINK_FIELDS);
  state.link = shared;
  const request = shared ?? { model: listing.default };
  // A link may name a model this server does not have: the default then.
  if (!modelInfo(request.model)) request.model = listing.default;
  modelSelect.value = request.model;
  fillForm(request);
  describeModel();
  // A speech or image model waits for its file (its note says what to do).
  if (!mediaModality(modelInfo(request.model))) await compute();
}

// ---------------------------------------------------------------------------
// The controls.

// What the modules under this one call back (models/state.js page).
Object.assign(page, { renderView, compute, views: VIEWS });

bindMedia(mediaElements, () => compute());
bindAtlas();
bindPromptImage();
bindHeadJump();
bindNumbers();
form.addEventListener("submit", (event) => {
  event.preventDefault();
  compute();
});
// Another model: its family's inputs, then its view at once (a model still loading is
// waited for; a speech or image model waits for its file).
modelSelect.addEventListener("change", () => {
  describeModel();
  adaptInputs(true);
  updateStale();
  const m = selectedModel();
  // A speech or image model waits for its file: the text model's maps, summary and token
  // strip go meanwhile (they are not of this model).
  if (m && mediaModality(m)) clearResults();
  if (m && !mediaModality(m) && m.state !== "failed") compute();
});
// Any edit of the inputs marks the results out of date (updateStale); Ctrl+Enter in a
// text box, or the note's Update button, computes.
form.addEventListener("input", updateStale);
form.addEventListener("input", (event) => {
  if (event.target === textsBox) describeInputs();
});
oneTextBox.addEventListener("change", describeInputs);
form.addEventListener("change", updateStale);
form.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && event.target.tagName === "TEXTAREA") {
    event.preventDefault();
    compute();
  }
});
refreshButton.addEventListener("click", () => compute());
blockSelect.addEventListener("change", () => {
  if (state.request) compute();
});
for (const control of [neuronHead, compareSentence, compareHead, compareModel]) {
  control.addEventListener("change", renderView);
}
for (const control of [sequenceSelect, hideSpecial, mergeWords]) {
  control.addEventListener("change", () => {
    state.queryIndex = null;
    targetSelect.value = ""; // another input's positions
    renderView();
  });
}
layerSelect.addEventListener("change", renderView);
// A whole-model method opens the view that draws it, and its map is brought into sight.
methodSelect.addEventListener("change", async () => {
  showMethod();
  const views = METHOD_VIEWS[methodSelect.value];
  if (views && !views.includes(state.view) && state.request) {
    state.view = views[0];
    writeUrlState(state.request, state.view);
  }
  if (await renderView()) revealMethod();
});
targetSelect.addEventListener("change", renderView);
ablateInput.addEventListener("change", () => {
  showMethod();
  renderView();
});
restoreHeads.addEventListener("click", () => {
  ablateInput.value = "";
  showMethod();
  renderView();
});
fillColourScales(colourScale);
colourScale.addEventListener("change", renderView);
shadeHead.addEventListener("change", () => {
  if (state.overview && state.view !== "generation") renderTokens(state.overview);
});
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && state.selected.size && state.view !== "generation") {
    selectToken(null);
  }
});
bindTabs((view) => {
  state.view = view;
  if (state.request) writeUrlState(state.request, state.view);
  else openTab(view);
  renderView();
});
bindDownloads("attnviz-model", () => state.view, () => {
  if (state.view === "atlas") {
    return state.atlas && { request: state.atlasRequest, response: state.atlas };
  }
  if (state.view === "generation" && state.queryIndex !== null && state.request) {
    const body = queryRequest(state.queryIndex);
    const res = state.queries.get(JSON.stringify(body));
    if (res) return { request: body, response: res };
  }
  return state.overview && { request: state.overviewRequest, response: state.overview };
});

window.attnvizModels = {
  lastResponse: null, lastQuery: null, timings: null, viewTimings: null, compute, selectQuery,
  views: Object.keys(VIEWS), // the tabs' data-view values, in their order (a test checks)
};
// The view's settings in the link (api.js): the defaults are left out.
bindLinkSettings(() => ({
  scale: colourScale.value === "auto" ? null : colourScale.value,
  tokens: [...state.selected].sort((x, y) => x - y).join(","),
  sequence: sequenceSelect.value === "0" ? null : sequenceSelect.value,
  layer: layerSelect.value === "0" ? null : layerSelect.value,
  method: otherMethod() ? methodSelect.value : null,
  target: gradientMethod() ? targetSelect.value || null : null,
  ablate: ablatedHeads().map(([l, h]) => `${l}.${h}`).join(","),
  query: state.view === "generation" && state.queryIndex !== null ? String(state.queryIndex) : null,
  head: headSetting(),
}));
state.view = viewFromUrl(state.view);
state.linked = settingsFromUrl();
selectLinked(colourScale, state.linked.scale);
selectLinked(methodSelect, state.linked.method);
if (state.linked.ablate) ablateInput.value = state.linked.ablate.replaceAll(",", " ");
showMethod();
openTab(state.view);
start();
