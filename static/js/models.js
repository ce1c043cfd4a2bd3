// AttnViz pretrained-model page: a typed sentence through a real BERT encoder;
// every layer's and head's attention (BertViz's model view), one layer's heads,
// the averages and attention rollout.
import {
  COMPACT, MODELS_LINK_FIELDS, bindDownloads, errorBox, fillIndexSelect, jsonFetcher,
  nonEmptyLines, onTabClick, openTab, option, paragraph, readUrlRequest, selectedIndex,
  viewFromUrl, whileBusy, writeUrlState,
} from "./api.js";
import { addPlot, clearPlots, heatmapFigure, thumbnailGrid, tokenHover } from "./heatmap.js";

const DEFAULT_TEXT = "The cat sat on the mat because it was tired.";

const form = document.getElementById("model-form");
const modelSelect = document.getElementById("model");
const modelDescription = document.getElementById("model-description");
const textsBox = document.getElementById("texts");
const pairsBox = document.getElementById("text-pairs");
const deviceSelect = document.getElementById("device");
const summary = document.getElementById("summary");
const displayNote = document.getElementById("display-note");
const sequenceSelect = document.getElementById("sequence-index");
const layerSelect = document.getElementById("layer-index");
const layerControl = document.getElementById("layer-control");
const hideSpecial = document.getElementById("hide-special");
const computeButton = document.getElementById("compute");

const THUMB_SIZE = 64; // thumbnails of longer inputs come block-max pooled to this size
// Narrower than this (px), the model view's columns are numbered 0, 1, ... instead of
// H0, H1, ...: twelve "H10"-wide labels do not fit side by side on a phone.
const NARROW_GRID = 560;
const state = {
  models: [], request: null, view: "model", overview: null, overviewKey: null, overviewRequest: null,
  layers: new Map(), fetchMs: 0, ticket: 0,
};

const errors = errorBox(document.getElementById("error"));
const showError = errors.show;
const clearError = errors.clear;
const fetchJson = jsonFetcher(showError);

// A hint above a figure, as HTML: it wraps on a phone, where a long figure title would
// be cut off at the figure's edge.
function addHint(container, text) {
  paragraph(container, "hint figure-hint", text);
}

function readRequest() {
  const texts = nonEmptyLines(textsBox.value);
  const request = { model: modelSelect.value || null, texts, device: deviceSelect.value };
  const pairs = pairsBox.value.split("\n").map((t) => (t.trim() === "" ? null : t.trim()));
  while (pairs.length && pairs[pairs.length - 1] === null) pairs.pop();
  if (pairs.length) {
    while (pairs.length < texts.length) pairs.push(null);
    request.text_pairs = pairs;
  }
  return request;
}

function fillForm(request) {
  if (request.model) modelSelect.value = request.model;
  textsBox.value = (request.texts || [DEFAULT_TEXT]).join("\n");
  pairsBox.value = (request.text_pairs || []).map((p) => p ?? "").join("\n");
  if (request.device) deviceSelect.value = request.device;
}

// The server does the per-input work: the input runs alone (no [PAD]), special tokens
// are hidden there (rows renormalised), and thumbnails of long inputs come pooled.
function viewRequest(extra) {
  return {
    ...state.request,
    ...COMPACT,
    sequence_index: selectedIndex(sequenceSelect),
    hide_special_tokens: hideSpecial.checked,
    ...extra,
  };
}

// The overview of the selected input: every layer and head (pooled to THUMB_SIZE when
// longer), the averages and rollout. Fetched again when the input or the hiding changes.
async function overview() {
  const body = viewRequest({ display_size: THUMB_SIZE });
  const key = JSON.stringify(body);
  if (state.overviewKey !== key) {
    const started = performance.now();
    const res = await fetchJson("/api/v1/models/attention", body);
    state.fetchMs = performance.now() - started;
    if (res === null) return null;
    state.overview = res;
    state.overviewKey = key;
    state.overviewRequest = body;
    state.layers = new Map();
    window.attnvizModels.lastResponse = res;
  }
  return state.overview;
}

// Full-resolution maps of layer l: {attentions: H x L x L, headMean: L x L}; from the
// overview when it is not pooled, else fetched once per layer.
async function layerMaps(res, l) {
  if (!res.downsample) return { attentions: res.attentions[l][0], headMean: res.head_mean[l][0] };
  if (!state.layers.has(l)) {
    const layer = await fetchJson("/api/v1/models/attention", viewRequest({ layer_index: l }));
    if (layer === null) return null;
    state.layers.set(l, { attentions: layer.attentions[0][0], headMean: layer.head_mean[0][0] });
  }
  return state.layers.get(l);
}

function describe(res) {
  const [, , H] = res.shape;
  return [
    `${res.model}: ${res.num_layers} layers × ${H} heads, d_model ${res.d_model}`,
    `attentions (N, B, H, L, L) = (${res.num_layers}, 1, ${H}, ${res.lengths[0]}, ` +
      `${res.lengths[0]}) for sentence ${res.sequence_index}`,
    `${res.device}, ${res.compute_ms.toFixed(1)} ms`,
  ].join(" · ");
}

function noteFor(res) {
  const parts = [`Sentence ${res.sequence_index}: ${res.lengths[0]} tokens, run alone (no [PAD])`];
  if (res.hidden_special_tokens) {
    parts.push("[CLS] and [SEP] hidden: each row is renormalised over the remaining tokens " +
      `so it sums to 1 again (they took ${(100 * res.special_share).toFixed(1)}% of each row ` +
      "on average, over all layers and heads)");
  }
  if (res.downsample) {
    const f = res.downsample.factor;
    parts.push(`thumbnails pooled to blocks of ${f} × ${f} tokens (block max); enlarged maps ` +
      "and the layer view are full resolution");
  }
  return `${parts.join(" · ")}. Rows are queries, columns keys.`;
}

function populateSelectors(request, numLayers) {
  fillIndexSelect(sequenceSelect, request.texts.map(
    (text, b) => `${b}: ${text.length > 40 ? `${text.slice(0, 40)}…` : text}`,
  ));
  fillIndexSelect(layerSelect, Array.from({ length: numLayers }, (_, l) => `Layer ${l}`));
}

function weightFigure(z, labels, title, showscale = true) {
  return heatmapFigure({
    z, rowLabels: labels, colLabels: labels, title, zmin: 0, showscale, valueName: "weight",
  });
}

async function showEnlarged(container, res, l, h) {
  const maps = await layerMaps(res, l);
  if (maps === null) return;
  clearPlots(container);
  container.dataset.layer = String(l);
  container.dataset.head = String(h);
  const div = addPlot(container, weightFigure(maps.attentions[h], res.tokens[0],
    `Layer ${l}, head ${h}`), "plot enlarged-plot");
  await div.drawn;
}

// Hover text of the thumbnails' rows and columns: the tokens, or the tokens each
// pooled block covers ("tokens 0–3: [CLS]…sat").
function thumbnailHover(res) {
  const tokens = res.tokens[0];
  const f = res.downsample ? res.downsample.factor : 1;
  if (f === 1) return tokenHover(tokens);
  const blocks = [];
  for (let i = 0; i < tokens.length; i += f) {
    const block = tokens.slice(i, i + f);
    blocks.push(block.length === 1 ? block[0] : `${block[0]}…${block[block.length - 1]}`);
  }
  return tokenHover(blocks, f, tokens.length);
}

// BertViz's model view: N x H thumbnails in one figure; a click enlarges one.
async function renderModelView(section, res) {
  const body = section.querySelector(".view-body");
  const enlarged = section.querySelector(".enlarged");
  clearPlots(body);
  const narrow = body.clientWidth < NARROW_GRID;
  addHint(body, `Rows are layers (L0–L${res.num_layers - 1}), columns heads ` +
    `(${narrow ? "" : "H"}0–${narrow ? "" : "H"}${res.num_heads - 1}); each thumbnail is ` +
    "scaled to its own maximum. Click one to enlarge it below.");
  const grid = thumbnailGrid(body, {
    rows: res.num_layers,
    cols: res.num_heads,
    cell: (l, h) => res.attentions[l][0][h],
    rowName: "L",
    colName: narrow ? "" : "H",
    title: "Layers × heads",
    zmax: "each",
    hover: (l, h) => `layer ${l}, head ${h}`,
    queryHover: thumbnailHover(res),
    keyHover: thumbnailHover(res),
    onClick: (l, h) => showEnlarged(enlarged, res, l, h),
  });
  grid.id = "model-grid";
  await Promise.all([grid.drawn, showEnlarged(enlarged, res, 0, 0)]);
}

// Every head of one layer, with token labels, at full resolution.
async function renderLayerView(section, res, l) {
  const body = section.querySelector(".view-body");
  const maps = await layerMaps(res, l);
  if (maps === null) return;
  clearPlots(body);
  const plots = [];
  for (let h = 0; h < res.num_heads; h += 1) {
    const div = addPlot(body, weightFigure(maps.attentions[h], res.tokens[0],
      `Layer ${l}, head ${h}`), "head-plot");
    div.dataset.head = String(h);
    plots.push(div.drawn);
  }
  await Promise.all(plots);
}

// The head average of each layer, one layer's head average, the mean over all layers
// and heads, and attention rollout (Abnar & Zuidema 2020).
async function renderAverages(section, res, l) {
  const body = section.querySelector(".view-body");
  const maps = await layerMaps(res, l);
  if (maps === null) return;
  clearPlots(body);
  const labels = res.tokens[0];
  addHint(body, "The head average of each layer, each scaled to its own maximum. Click " +
    "one to show it below.");
  const strip = thumbnailGrid(body, {
    rows: 1,
    cols: res.num_layers,
    cell: (_, layer) => res.head_mean[layer][0],
    rowName: "",
    colName: "L",
    title: "Head average of each layer",
    zmax: "each",
    hover: (_, layer) => `layer ${layer}, mean of ${res.num_heads} heads`,
    queryHover: thumbnailHover(res),
    keyHover: thumbnailHover(res),
    onClick: (_, layer) => {
      layerSelect.value = String(layer);
      renderView();
    },
  });
  strip.id = "layer-strip";
  const grid = document.createElement("div");
  grid.className = "heads";
  body.append(grid);
  const figures = [
    ["head-mean", maps.headMean, `Head average, layer ${l}`],
    ["layer-mean", res.layer_mean[0], `Average of all ${res.num_layers} layers and heads`],
    ["rollout", res.rollout[0], "Attention rollout (Abnar & Zuidema 2020)"],
  ];
  const plots = [strip.drawn];
  for (const [name, z, title] of figures) {
    const div = addPlot(grid, weightFigure(z, labels, title), "head-plot");
    div.dataset.map = name;
    plots.push(div.drawn);
  }
  paragraph(body, "hint", "Rollout: per layer, Â = 0.5 · (head average) + 0.5 · I for the " +
    "residual connection, then Â_N ⋯ Â_1, computed with every token: row i is how much of " +
    "token i's last-layer representation flows from each input token; its rows sum to 1.");
  await Promise.all(plots);
}

async function renderView() {
  if (!state.request) return;
  const ticket = (state.ticket += 1);
  const section = document.getElementById(`view-${state.view}`);
  section.dataset.drawn = "false";
  openTab(state.view);
  layerControl.hidden = state.view === "model";
  const res = await overview();
  if (res === null || ticket !== state.ticket) return;
  clearError();
  summary.textContent = describe(res);
  displayNote.textContent = noteFor(res);
  const l = selectedIndex(layerSelect);
  if (state.view === "model") await renderModelView(section, res);
  else if (state.view === "layer") await renderLayerView(section, res, l);
  else await renderAverages(section, res, l);
  if (ticket === state.ticket) section.dataset.drawn = "true";
}

async function compute() {
  clearError();
  await whileBusy(computeButton, async () => {
    const request = readRequest();
    // The link carries this request from now on, also while it is being computed (a tab
    // clicked before the response writes it, not the previous one).
    writeUrlState(request, state.view);
    const model = state.models.find((m) => m.name === request.model) || state.models[0];
    state.request = request;
    state.overviewKey = null;
    populateSelectors(request, model.num_layers);
    const started = performance.now();
    await renderView();
    if (state.overviewKey === null) return; // the API refused it: the error is shown
    const drawn = performance.now();
    // Milliseconds from the request to the response, and from there to the drawn view.
    window.attnvizModels.timings = { responseMs: state.fetchMs, drawMs: drawn - started - state.fetchMs };
  });
}

async function start() {
  const listing = await fetchJson("/api/v1/models");
  if (!listing) return;
  state.models = listing.models;
  if (!listing.models.length) {
    summary.textContent = listing.install_hint;
    showError(listing.install_hint);
    computeButton.disabled = true;
    return;
  }
  modelSelect.append(...listing.models.map((model) => option(model.name, model.name)));
  const describeModel = () => {
    const m = state.models.find((x) => x.name === modelSelect.value);
    modelDescription.textContent = m
      ? `${m.num_layers} layers × ${m.num_heads} heads, d_model ${m.d_model}, ` +
        `${(m.num_parameters / 1e6).toFixed(1)}M parameters, up to ${m.max_tokens} tokens; ` +
        `from ${m.source}`
      : "";
  };
  modelSelect.addEventListener("change", describeModel);
  const shared = await readUrlRequest(MODELS_LINK_FIELDS);
  fillForm(shared ?? { model: listing.default });
  describeModel();
  await compute();
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  compute();
});
for (const control of [sequenceSelect, layerSelect, hideSpecial]) {
  control.addEventListener("change", renderView);
}
onTabClick((view) => {
  state.view = view;
  if (state.request) writeUrlState(state.request, state.view);
  renderView();
});
bindDownloads("attnviz-model", () => state.view,
  () => state.overview && { request: state.overviewRequest, response: state.overview });

window.attnvizModels = { lastResponse: null, timings: null, compute };
state.view = viewFromUrl(state.view);
start();
