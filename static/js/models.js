// AttnViz pretrained-model page: a typed sentence through a real BERT encoder;
// every layer's and head's attention (BertViz's model view), one layer's heads,
// the averages and attention rollout.
import { fetchJson as fetchApi } from "./api.js";
import { addPlot, clearPlots, heatmapFigure, maxOf, thumbnailGrid } from "./heatmap.js";

const DEFAULT_TEXT = "The cat sat on the mat because it was tired.";
const COMPACT = { encoding: "base64_float32" };

const form = document.getElementById("model-form");
const modelSelect = document.getElementById("model");
const modelDescription = document.getElementById("model-description");
const textsBox = document.getElementById("texts");
const pairsBox = document.getElementById("text-pairs");
const deviceSelect = document.getElementById("device");
const errorBox = document.getElementById("error");
const summary = document.getElementById("summary");
const displayNote = document.getElementById("display-note");
const sequenceSelect = document.getElementById("sequence-index");
const layerSelect = document.getElementById("layer-index");
const layerControl = document.getElementById("layer-control");
const hideSpecial = document.getElementById("hide-special");
const computeButton = document.getElementById("compute");
const tabs = [...document.querySelectorAll(".tabs button")];

const state = { models: [], response: null, request: null, view: "model" };

function showError(message) {
  errorBox.textContent = message;
  errorBox.hidden = false;
}

function clearError() {
  errorBox.textContent = "";
  errorBox.hidden = true;
}

function fetchJson(url, body) {
  return fetchApi(url, body, showError);
}

function readRequest() {
  const texts = textsBox.value.split("\n").map((t) => t.trim()).filter((t) => t !== "");
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

// The request and the view travel in the URL (?request=<JSON>#view).
function writeUrl(request) {
  const url = new URL(window.location.href);
  url.searchParams.set("request", JSON.stringify(request));
  url.hash = state.view;
  window.history.replaceState(null, "", url);
}

function readUrl() {
  const raw = new URL(window.location.href).searchParams.get("request");
  try {
    return raw === null ? null : JSON.parse(raw);
  } catch {
    return null;
  }
}

// Positions of sentence b to draw: its real tokens ([PAD] dropped: every real
// token gives it exactly 0, so no row changes), and without [CLS]/[SEP] when hidden.
function shownPositions(res, b) {
  const keep = [];
  for (let i = 0; i < res.tokens[b].length; i += 1) {
    if (!res.attention_mask[b][i]) continue;
    if (hideSpecial.checked && res.special_tokens_mask[b][i]) continue;
    keep.push(i);
  }
  return keep;
}

// The rows and columns of `keep`; with special tokens hidden, each row is divided by
// its sum over the kept keys, so it sums to 1 again.
function view(matrix, keep) {
  return keep.map((i) => {
    const row = keep.map((j) => matrix[i][j]);
    if (!hideSpecial.checked) return row;
    const total = row.reduce((a, v) => a + v, 0);
    return total > 0 ? row.map((v) => v / total) : row;
  });
}

// Mean share of each shown row that went to [CLS] and [SEP], over all layers and heads.
function specialShare(res, b, keep) {
  const special = [];
  for (let j = 0; j < res.tokens[b].length; j += 1) {
    if (res.attention_mask[b][j] && res.special_tokens_mask[b][j]) special.push(j);
  }
  const mean = res.layer_mean[b];
  let share = 0;
  for (const i of keep) share += special.reduce((a, j) => a + mean[i][j], 0);
  return keep.length ? share / keep.length : 0;
}

function describe(res) {
  const [N, B, H, L] = res.shape;
  return [
    `${res.model}: ${N} layers × ${H} heads, d_model ${res.d_model}`,
    `attentions (N, B, H, L, L) = (${N}, ${B}, ${H}, ${L}, ${L})`,
    `${res.device}, ${res.compute_ms.toFixed(1)} ms`,
  ].join(" · ");
}

function noteFor(res, b, keep) {
  const dropped = res.tokens[b].length - res.lengths[b];
  const parts = [`Sentence ${b}: ${keep.length} tokens shown`];
  if (dropped > 0) parts.push(`${dropped} [PAD] dropped (they get weight 0)`);
  if (hideSpecial.checked) {
    const share = specialShare(res, b, keep);
    parts.push("[CLS] and [SEP] hidden: each row is renormalised over the remaining tokens " +
      `so it sums to 1 again (they took ${(100 * share).toFixed(1)}% of each row on average, ` +
      "over all layers and heads)");
  }
  return `${parts.join(" · ")}. Rows are queries, columns keys.`;
}

function populateSelectors(res) {
  const previous = Number(sequenceSelect.value || 0);
  sequenceSelect.replaceChildren();
  res.tokens.forEach((tokens, b) => {
    const option = document.createElement("option");
    option.value = String(b);
    const words = tokens.slice(1, Math.min(7, res.lengths[b] - 1)).join(" "); // after [CLS]
    option.textContent = `${b}: ${words}${res.lengths[b] > 8 ? " …" : ""}`;
    sequenceSelect.append(option);
  });
  sequenceSelect.value = String(previous < res.shape[1] ? previous : 0);
  const previousLayer = Number(layerSelect.value || 0);
  layerSelect.replaceChildren();
  for (let l = 0; l < res.num_layers; l += 1) {
    const option = document.createElement("option");
    option.value = String(l);
    option.textContent = `Layer ${l}`;
    layerSelect.append(option);
  }
  layerSelect.value = String(previousLayer < res.num_layers ? previousLayer : 0);
}

function weightFigure(z, labels, title, showscale = true) {
  return heatmapFigure({
    z, rowLabels: labels, colLabels: labels, title, zmin: 0, showscale, valueName: "weight",
  });
}

function showEnlarged(container, res, b, keep, l, h) {
  clearPlots(container);
  container.dataset.layer = String(l);
  container.dataset.head = String(h);
  const labels = keep.map((i) => res.tokens[b][i]);
  addPlot(container, weightFigure(view(res.attentions[l][b][h], keep), labels,
    `Layer ${l}, head ${h}`), "plot enlarged-plot");
}

// BertViz's model view: N x H thumbnails in one figure; a click enlarges one.
async function renderModelView(section, res, b, keep) {
  const body = section.querySelector(".view-body");
  const enlarged = section.querySelector(".enlarged");
  clearPlots(body);
  const grid = thumbnailGrid(body, {
    rows: res.num_layers,
    cols: res.num_heads,
    cell: (l, h) => view(res.attentions[l][b][h], keep),
    rowName: "L",
    colName: "H",
    title: "Layers (rows) × heads (columns); each thumbnail scaled to its own maximum; " +
      "click one to enlarge",
    zmax: "each",
    hover: (l, h) => `layer ${l}, head ${h}`,
    onClick: (l, h) => showEnlarged(enlarged, res, b, keep, l, h),
  });
  grid.id = "model-grid";
  showEnlarged(enlarged, res, b, keep, 0, 0);
  await grid.drawn;
}

// Every head of one layer, with token labels.
async function renderLayerView(section, res, b, keep, l) {
  const body = section.querySelector(".view-body");
  clearPlots(body);
  const labels = keep.map((i) => res.tokens[b][i]);
  const plots = [];
  for (let h = 0; h < res.num_heads; h += 1) {
    const div = addPlot(body, weightFigure(view(res.attentions[l][b][h], keep), labels,
      `Layer ${l}, head ${h}`), "head-plot");
    div.dataset.head = String(h);
    plots.push(div.drawn);
  }
  await Promise.all(plots);
}

// The head average of each layer, one layer's head average, the mean over all layers
// and heads, and attention rollout (Abnar & Zuidema 2020).
async function renderAverages(section, res, b, keep, l) {
  const body = section.querySelector(".view-body");
  clearPlots(body);
  const labels = keep.map((i) => res.tokens[b][i]);
  const strip = thumbnailGrid(body, {
    rows: 1,
    cols: res.num_layers,
    cell: (_, layer) => view(res.head_mean[layer][b], keep),
    rowName: "",
    colName: "L",
    title: "Head average of each layer (click one to show it below)",
    zmax: "each",
    hover: (_, layer) => `layer ${layer}, mean of ${res.num_heads} heads`,
    onClick: (_, layer) => {
      layerSelect.value = String(layer);
      renderView();
    },
  });
  strip.id = "layer-strip";
  const maps = document.createElement("div");
  maps.className = "heads";
  body.append(maps);
  const figures = [
    ["head-mean", view(res.head_mean[l][b], keep), `Head average, layer ${l}`],
    ["layer-mean", view(res.layer_mean[b], keep), `Average of all ${res.num_layers} layers and heads`],
    ["rollout", view(res.rollout[b], keep), "Attention rollout (Abnar & Zuidema 2020)"],
  ];
  const plots = [strip.drawn];
  for (const [name, z, title] of figures) {
    const div = addPlot(maps, weightFigure(z, labels, title), "head-plot");
    div.dataset.map = name;
    plots.push(div.drawn);
  }
  const note = document.createElement("p");
  note.className = "hint";
  note.textContent = "Rollout: per layer, Â = 0.5 · (head average) + 0.5 · I for the residual " +
    "connection, then Â_N ⋯ Â_1: row i is how much of token i's last-layer representation " +
    "flows from each input token; its rows sum to 1.";
  body.append(note);
  await Promise.all(plots);
}

async function renderView() {
  const res = state.response;
  if (!res) return;
  const b = Number(sequenceSelect.value || 0);
  const l = Number(layerSelect.value || 0);
  const keep = shownPositions(res, b);
  summary.textContent = describe(res);
  displayNote.textContent = noteFor(res, b, keep);
  layerControl.hidden = state.view === "model";
  for (const tab of tabs) {
    const active = tab.dataset.view === state.view;
    tab.setAttribute("aria-selected", String(active));
    document.getElementById(`view-${tab.dataset.view}`).hidden = !active;
  }
  const section = document.getElementById(`view-${state.view}`);
  section.dataset.drawn = "false";
  if (state.view === "model") await renderModelView(section, res, b, keep);
  else if (state.view === "layer") await renderLayerView(section, res, b, keep, l);
  else await renderAverages(section, res, b, keep, l);
  section.dataset.drawn = "true";
}

async function compute() {
  clearError();
  computeButton.disabled = true;
  const progress = document.getElementById("progress");
  const showProgress = setTimeout(() => { progress.hidden = false; }, 300);
  try {
    const request = readRequest();
    writeUrl(request);
    const started = performance.now();
    const res = await fetchJson("/api/v1/models/attention", { ...request, ...COMPACT });
    if (res === null) return;
    const received = performance.now();
    state.response = res;
    state.request = request;
    window.attnvizModels.lastResponse = res;
    populateSelectors(res);
    await renderView();
    const drawn = performance.now();
    // Milliseconds from the request to the response, and from there to the drawn view.
    window.attnvizModels.timings = { responseMs: received - started, drawMs: drawn - received };
  } finally {
    clearTimeout(showProgress);
    progress.hidden = true;
    computeButton.disabled = false;
  }
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
  for (const model of listing.models) {
    const option = document.createElement("option");
    option.value = model.name;
    option.textContent = model.name;
    modelSelect.append(option);
  }
  const describeModel = () => {
    const m = state.models.find((x) => x.name === modelSelect.value);
    modelDescription.textContent = m
      ? `${m.num_layers} layers × ${m.num_heads} heads, d_model ${m.d_model}, ` +
        `${(m.num_parameters / 1e6).toFixed(1)}M parameters, up to ${m.max_tokens} tokens; ` +
        `from ${m.source}`
      : "";
  };
  modelSelect.addEventListener("change", describeModel);
  const shared = readUrl();
  fillForm(shared && Array.isArray(shared.texts) ? shared : { model: listing.default });
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
for (const tab of tabs) {
  tab.addEventListener("click", () => {
    state.view = tab.dataset.view;
    if (state.request) writeUrl(state.request);
    renderView();
  });
}
document.getElementById("download-json").addEventListener("click", () => {
  if (!state.response) return;
  const link = document.createElement("a");
  const body = JSON.stringify({ request: state.request, response: state.response });
  link.href = URL.createObjectURL(new Blob([body], { type: "application/json" }));
  link.download = "attnviz-model.json";
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
});

window.attnvizModels = { lastResponse: null, timings: null, compute };
const sharedView = window.location.hash.slice(1);
if (["model", "layer", "averages"].includes(sharedView)) state.view = sharedView;
start();
