// AttnViz page: the form, the per-head heatmaps, and the tabs of the lesson views.
// JSON from the API is snake_case; camelCase names are used only for JS locals.
import {
  addPlot, attentionHover, clearPlots, fillColourScales, heatmapFigure, maxOf, resolveScale,
  visibleWeights,
} from "./heatmap.js";
import {
  ATTENTION_LINK_FIELDS, COMPACT, DISPLAY_SIZE, bindDownloads, bindLinkSettings, bindTabs, busy,
  fillIndexSelect, linkedTokens, oneHeadAnswer, openTab, option, readUrlRequest, selectLinked,
  selectedIndex, settingsFromUrl, viewFromUrl, whileBusy, writeLinkSettings, writeUrlState,
} from "./api.js";
import { VIEWS } from "./lessons.js";
import { sequenceChoices } from "./lessons/common.js";
import {
  additive, fillHeadChoice, focusToken, nextSelection, outline, selectionShapes, shadedWeights,
  tokenStrip,
} from "./tokens.js";
import { clearError, errorElement, fetchJson, unmarkField } from "./attnviz/errors.js";
import { fillForm, fitVocabulary, readRequest } from "./attnviz/form.js";
import { describe, renderBadge } from "./attnviz/summary.js";

const SCRIPT_START = performance.now();
// The heads grid draws at most this many rows and columns per head; larger
// matrices are block-pooled on the server (block max) and a click on a head
// fetches it at up to ZOOM_SIZE.
const ZOOM_SIZE = 1024;

const form = document.getElementById("attn-form");
const presetSelect = document.getElementById("preset");
const presetDescription = document.getElementById("preset-description");
const summary = document.getElementById("summary");
const sequenceSelect = document.getElementById("sequence-index");
const headSelect = document.getElementById("head-index");
const colourScale = document.getElementById("colour-scale");
const shadeHead = document.getElementById("shade-head");
const queryStrip = document.getElementById("query-strip");
const keyStrip = document.getElementById("key-strip");
const headControl = document.getElementById("head-control");
const headsContainer = document.getElementById("heads");
const zoomContainer = document.getElementById("head-zoom");
const computeButton = document.getElementById("compute");
const results = document.querySelector(".results");
const staleNote = document.getElementById("stale-note");
const maskNote = document.getElementById("mask-note");

const presets = JSON.parse(document.getElementById("presets-data").textContent);
const defaultPreset = JSON.parse(document.getElementById("default-preset").textContent);

// requestKey: the form as it was for the shown results (see formKey); presetKey: the
// form as the selected preset fills it.
const state = {
  selected: new Set(), // the selected query positions (tokens.js)
  response: null, request: null, view: "heads", requestKey: null, preset: null, presetKey: null,
  link: null,
  linked: {}, // the link's sequence and head, applied to the first response (api.js)
};

// The link: state.link and the open tab. state.link is the request being computed, from
// Compute on; state.request, the shown one, is set only once its response is in (a tab
// clicked meanwhile would write the previous request).
function writeUrl() {
  writeUrlState(state.link, state.view);
}

// The input the form holds, as a string to compare with a preset's.
function inputKey() {
  return JSON.stringify(readRequest(form));
}

// What the form asks for, as a string to compare with the shown results': the input
// and the verify box.
function formKey() {
  return JSON.stringify({ ...readRequest(form), verify: form.verify.checked });
}

// The shown results are stale while the form differs from the request that made
// them: dimmed, with a note, until Compute.
function updateStale() {
  const stale = state.requestKey !== null && formKey() !== state.requestKey;
  results.classList.toggle("stale", stale);
  results.dataset.stale = String(stale);
  staleNote.hidden = !stale;
}

// The preset picker says "Custom" once the form no longer equals the preset.
function updatePreset() {
  if (state.preset === null) return;
  if (inputKey() === state.presetKey) {
    presetSelect.value = state.preset.name;
    presetDescription.textContent = state.preset.description;
  } else {
    presetSelect.value = CUSTOM;
    presetDescription.textContent = `Your own input (changed from "${state.preset.title}"); ` +
      "pick a preset to start from it again.";
  }
}

// After a refused request nothing of an earlier one stays on screen: the views are
// emptied and the badge hidden, and the summary says why.
function clearResults() {
  state.response = null;
  state.requestKey = null;
  updateStale();
  for (const container of [headsContainer, zoomContainer,
    ...document.querySelectorAll(".view .view-body")]) {
    clearPlots(container);
  }
  for (const section of document.querySelectorAll(".view")) section.dataset.drawn = "false";
  headsContainer.dataset.drawnHeads = "0";
  document.getElementById("verify-badge").hidden = true;
  summary.textContent = "Nothing to show: the request was refused. Fix the field marked " +
    "in red and press Compute.";
}

async function compute() {
  clearError();
  await whileBusy(computeButton, async () => {
    fitVocabulary(form); // words need one id each: vocab_size grows to fit, and says so
    const request = readRequest(form);
    state.link = { ...request, verify: form.verify.checked };
    writeUrl();
    const started = performance.now();
    const key = formKey();
    const body = await fetchJson("/api/v1/attention", {
      ...request, ...COMPACT, verify: form.verify.checked, display_size: DISPLAY_SIZE,
    });
    if (body === null) {
      clearResults();
      errorElement.scrollIntoView({ block: "nearest" });
      return;
    }
    const received = performance.now();
    state.response = body;
    state.request = request;
    state.requestKey = key;
    updateStale();
    window.attnviz.lastResponse = body;
    populateSelectors(body);
    await renderView();
    const drawn = performance.now();
    // Milliseconds: request + decode, drawing after the response, since this
    // script started (the page and Plotly.js loaded), and since navigation began.
    window.attnviz.timings = {
      responseMs: received - started,
      drawMs: drawn - received,
      sinceScriptMs: drawn - SCRIPT_START,
      sinceLoadMs: drawn,
    };
    headsContainer.dataset.drawMs = (drawn - received).toFixed(1);
  });
}

// ---------------------------------------------------------------------------
// Token selection (tokens.js) in the Heads view. Positions count the drawn rows: tokens,
// or blocks of tokens when the maps are pooled.

function selfAttention(data) {
  return data.attention !== "cross";
}

// The weight each key gets from the selected queries, for the head chosen in #shade-head
// or the mean of the heads; null when nothing is selected.
function selectionWeights(data, b) {
  if (state.selected.size === 0) return null;
  return shadedWeights(data.weights[b], state.selected, shadeHead.value);
}

function renderTokens(data, b) {
  const weights = selectionWeights(data, b);
  const self = selfAttention(data);
  const queries = data.query_labels[b];
  tokenStrip(queryStrip, queries, {
    selected: state.selected,
    weights: self ? weights : null,
    label: self ? "Tokens" : "Queries (target tokens)",
    onSelect: selectToken,
  });
  keyStrip.hidden = self;
  if (!self) {
    tokenStrip(keyStrip, data.key_labels[b], {
      weights, label: "Keys (source tokens), shaded by the selected queries' weights",
      onSelect: () => {},
    });
  }
  queryStrip.dataset.selected = [...state.selected].sort((x, y) => x - y).join(",");
}

// Outline the selection on every head's map (and on the enlarged head when it has the
// same rows).
function outlineHeads(data) {
  const [, , rows, cols] = data.shape;
  const shapes = selectionShapes(state.selected, { rows, cols }, selfAttention(data));
  const outlined = [...headsContainer.querySelectorAll(".head-plot")].map((div) => outline(div, shapes));
  const zoom = zoomContainer.querySelector(".plot");
  if (zoom && !data.downsample) outlined.push(outline(zoom, shapes));
  return Promise.all(outlined);
}

// Position q was chosen (null: clear) on the strip, a map or an axis; `add`: shift-click.
async function selectToken(q, add = false, fromKeyboard = false) {
  const data = state.response;
  if (!data) return;
  const b = selectedIndex(sequenceSelect);
  state.selected = q === null ? new Set() : nextSelection(state.selected, q, add);
  renderTokens(data, b);
  if (fromKeyboard && q !== null) focusToken(queryStrip, q);
  await outlineHeads(data);
  headsContainer.dataset.selected = queryStrip.dataset.selected;
  writeLinkSettings(state.view);
}

// Clicks on a drawn head: on a cell (its query row) and on the axes' tick labels.
function bindSelection(div, data) {
  div.on("plotly_click", (event) => {
    const point = event.points && event.points[0];
    if (point) selectToken(point.y, additive(event.event));
  });
  // Delegated: Plotly redraws the tick labels (CSS makes them clickable: .selectable).
  div.classList.add("selectable");
  div.addEventListener("click", (event) => {
    const tick = event.target.closest(".ytick, .xtick");
    if (!tick || (tick.classList.contains("xtick") && !selfAttention(data))) return;
    const position = tick.__data__ && tick.__data__.x;
    if (Number.isInteger(position)) selectToken(position, additive(event));
  });
}

// The pickers of the response `data` to state.request (the sequences: lessons/common.js).
function populateSelectors(data) {
  fillIndexSelect(sequenceSelect, sequenceChoices(state.request));
  fillIndexSelect(headSelect, Array.from({ length: data.shape[1] }, (_, h) => `Head ${h}`));
  selectLinked(sequenceSelect, state.linked.sequence);
  selectLinked(headSelect, state.linked.head);
  state.linked = {};
  fillHeadChoice(shadeHead, data.shape[1]);
  // A selection outlives a new input when its rows are still there.
  if ([...state.selected].some((q) => q >= data.shape[2])) state.selected = new Set();
}

async function renderHeads(data, b) {
  clearPlots(headsContainer);
  clearPlots(zoomContainer);
  let zmax = 0;
  for (const head of data.weights[b]) zmax = Math.max(zmax, maxOf(head));
  const numHeads = data.shape[1];
  const scale = resolveScale(colourScale.value, data.full_shape[2]);
  const plots = [];
  for (let h = 0; h < numHeads; h += 1) {
    const figure = heatmapFigure({
      z: visibleWeights(data.weights[b][h], data.attn_mask[b]),
      rowLabels: data.query_labels[b],
      colLabels: data.key_labels[b],
      ...attentionHover(data, b),
      title: `Head ${h}`,
      zmin: 0,
      zmax: zmax > 0 ? zmax : 1,
      scale,
      // One colour bar for the shared scales; each head its own when each has its range.
      showscale: scale === "head" || h === numHeads - 1,
      valueName: "weight",
      maskedNote: "masked: weight 0",
    });
    const div = addPlot(headsContainer, figure, "head-plot");
    div.dataset.head = String(h);
    div.drawn.then(() => bindSelection(div, data));
    if (data.downsample) {
      div.classList.add("zoomable");
      div.drawn.then(() => div.on("plotly_click", () => zoomHead(b, h)));
    }
    plots.push(div.drawn);
  }
  await Promise.all(plots);
  renderTokens(data, b);
  if (state.selected.size) await outlineHeads(data);
  headsContainer.dataset.selected = queryStrip.dataset.selected;
  headsContainer.dataset.drawnSequence = String(b);
  headsContainer.dataset.drawnHeads = String(numHeads);
}

// One head of one sequence at full resolution (up to ZOOM_SIZE per side).
async function zoomHead(b, h) {
  const res = await busy(() => fetchJson("/api/v1/attention", {
    ...state.request, ...COMPACT, sequence_index: b, head_index: h, display_size: ZOOM_SIZE,
  }), "Computing this head at full resolution…");
  if (!res) return;
  const head = oneHeadAnswer(res);
  clearPlots(zoomContainer);
  const [, , Lq, Lk] = res.shape;
  const title = res.downsample
    ? `Head ${h}, sequence ${b}: ${Lq} × ${Lk} blocks (block ${res.downsample.method})`
    : `Head ${h}, sequence ${b}: full resolution ${Lq} × ${Lk}`;
  const div = addPlot(zoomContainer, heatmapFigure({
    z: visibleWeights(head.weights, head.mask),
    rowLabels: head.queries, colLabels: head.keys, ...attentionHover(res, 0), title,
    zmin: 0, valueName: "weight", maskedNote: "masked: weight 0",
    scale: resolveScale(colourScale.value, res.full_shape[2], "head"),
  }), "plot zoom-plot");
  await div.drawn;
  if (!res.downsample && !state.response.downsample && state.selected.size) {
    await outlineHeads(state.response);
  }
  zoomContainer.dataset.head = String(h);
}

// The Layers tab runs the tutorials' stack, whose masks are fixed (lessons.js LAYER_MASKS,
// shown on the tab): there the mask checkboxes are disabled, with #mask-note.
function syncMaskControls() {
  const fixed = state.view === "layers";
  form.mask_padding.disabled = fixed;
  form.mask_causal.disabled = fixed;
  maskNote.hidden = !fixed;
}

async function renderView() {
  syncMaskControls();
  openTab(state.view);
  writeLinkSettings(state.view);
  const view = VIEWS[state.view];
  headControl.hidden = !(view && view.usesHead);
  const data = state.response;
  if (!data) return; // nothing computed yet, or the last request was refused
  const b = selectedIndex(sequenceSelect);
  const h = selectedIndex(headSelect);
  summary.textContent = describe(data);
  renderBadge(data);
  const container = document.getElementById(`view-${state.view}`);
  container.dataset.drawn = "false";
  const started = performance.now();
  let received = started; // when the view's last request was answered
  let shown = null; // when its maps on screen were drawn, if before the others (ctx.shown)
  const timedFetch = async (...args) => {
    const body = await fetchJson(...args);
    received = performance.now();
    return body;
  };
  if (state.view === "heads") {
    await busy(() => renderHeads(data, b), "Drawing…");
  } else {
    clearError();
    await busy(() => view.render(container.querySelector(".view-body"), {
      data, request: state.request, sequence: b, head: h, fetchJson: timedFetch,
      scale: colourScale.value,
      shown: (at) => { shown = at; },
      selected: state.selected,
      select: async (q, add) => {
        await selectToken(q, add);
        renderView();
      },
    }), "Computing this view…");
  }
  const drawn = performance.now();
  // Milliseconds: the view's own requests, and its drawing after the last one arrived:
  // of the maps on screen (drawMs; the step-through draws the others after them) and of
  // every map (allDrawnMs).
  window.attnviz.viewTimings = {
    view: state.view,
    fetchMs: received - started,
    drawMs: Math.max(0, Math.min(shown ?? drawn, drawn) - received),
    allDrawnMs: drawn - received,
  };
  container.dataset.drawn = "true";
}

function selectPreset(name) {
  const preset = presets.find((p) => p.name === name) || presets[0];
  presetSelect.value = preset.name;
  presetDescription.textContent = preset.description;
  fillForm(form, preset.request);
  state.preset = preset;
  state.presetKey = inputKey();
}

const CUSTOM = "custom";
presetSelect.append(...presets.map((preset) => option(preset.name, preset.title)));
const customOption = option(CUSTOM, "Custom");
customOption.disabled = true;
presetSelect.append(customOption);

presetSelect.addEventListener("change", () => {
  selectPreset(presetSelect.value);
  compute();
});
form.addEventListener("submit", (event) => {
  event.preventDefault();
  compute();
});
for (const type of ["input", "change"]) {
  form.addEventListener(type, (event) => {
    if (event.target === presetSelect) return;
    unmarkField(event.target);
    updatePreset();
    updateStale();
  });
}
for (const container of document.querySelectorAll(".view-controls")) {
  container.addEventListener("input", (event) => unmarkField(event.target));
}
fillColourScales(colourScale);
colourScale.addEventListener("change", renderView);
sequenceSelect.addEventListener("change", () => {
  state.selected = new Set();
  renderView();
});
shadeHead.addEventListener("change", () => {
  if (state.response) renderTokens(state.response, selectedIndex(sequenceSelect));
});
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && state.view === "heads" && state.selected.size) selectToken(null);
});
headSelect.addEventListener("change", renderView);
bindTabs((view) => {
  state.view = view;
  if (state.link) writeUrl();
  renderView();
});
bindDownloads("attnviz", () => state.view,
  () => state.response && { request: state.request, response: state.response });
for (const container of document.querySelectorAll(".view-controls")) {
  container.addEventListener("change", renderView);
}

window.attnviz = { lastResponse: null, compute: compute, viewTimings: null, selectToken };
// The view's settings in the link (api.js): the defaults are left out.
bindLinkSettings(() => ({
  scale: colourScale.value === "auto" ? null : colourScale.value,
  tokens: [...state.selected].sort((x, y) => x - y).join(","),
  sequence: sequenceSelect.value === "0" ? null : sequenceSelect.value,
  head: headSelect.value === "0" ? null : headSelect.value,
}));
state.view = viewFromUrl(state.view);
openTab(state.view); // the link's tab, and the tab list's one stop (roving tabindex)
const settings = settingsFromUrl();
selectLinked(colourScale, settings.scale);
state.selected = linkedTokens(settings.tokens); // dropped if the input has fewer rows
state.linked = settings;
const shared = await readUrlRequest(ATTENTION_LINK_FIELDS);
if (shared && Array.isArray(shared.sequences)) {
  selectPreset(defaultPreset);
  fillForm(form, { ...presets[0].request, ...shared });
  if (shared.verify === false) form.verify.checked = false;
  // The link's input may be a preset's: each preset's input, read back through the form.
  const key = inputKey();
  const same = presets.find((p) => (fillForm(form, p.request), inputKey() === key));
  fillForm(form, { ...presets[0].request, ...shared });
  if (same) {
    selectPreset(same.name);
  } else {
    presetSelect.value = CUSTOM;
    presetDescription.textContent = "Your own input, from the link.";
  }
} else {
  selectPreset(defaultPreset);
}
syncMaskControls();
compute();
