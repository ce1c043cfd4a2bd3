// AttnViz page: the form, the per-head heatmaps, and the tabs of the lesson views.
// JSON from the API is snake_case; camelCase names are used only for JS locals.
import {
  addPlot, clearPlots, heatmapFigure, maxOf, visibleWeights,
} from "./heatmap.js";
import {
  ATTENTION_LINK_FIELDS, bindImageDownloads, download, errorBox, fetchJson as fetchApi,
  readUrlRequest, writeUrlState,
} from "./api.js";
import { VIEWS } from "./lessons.js";

const SCRIPT_START = performance.now();
const INT_TOKEN = /^-?\d+$/;
// The heads grid draws at most this many rows and columns per head; larger
// matrices are block-pooled on the server (block max) and a click on a head
// fetches it at up to ZOOM_SIZE.
const DISPLAY_SIZE = 128;
const ZOOM_SIZE = 1024;
const COMPACT = { encoding: "base64_float32" };

const form = document.getElementById("attn-form");
const presetSelect = document.getElementById("preset");
const presetDescription = document.getElementById("preset-description");
const summary = document.getElementById("summary");
const sequenceSelect = document.getElementById("sequence-index");
const headSelect = document.getElementById("head-index");
const headControl = document.getElementById("head-control");
const headsContainer = document.getElementById("heads");
const zoomContainer = document.getElementById("head-zoom");
const computeButton = document.getElementById("compute");
const tabs = [...document.querySelectorAll(".tabs button")];

const presets = JSON.parse(document.getElementById("presets-data").textContent);
const defaultPreset = JSON.parse(document.getElementById("default-preset").textContent);

const state = { response: null, request: null, view: "heads" };

function sequenceToLine(seq) {
  return Array.isArray(seq) ? seq.join(" ") : seq;
}

function fillForm(request) {
  form.sequences.value = request.sequences.map(sequenceToLine).join("\n");
  form.targets.value = (request.targets || []).map(sequenceToLine).join("\n");
  for (const name of ["d_model", "num_heads", "seed", "pad_id", "vocab_size", "device"]) {
    form[name].value = request[name];
  }
  form.mask_padding.checked = request.mask === "padding" || request.mask === "padding_causal";
  form.mask_causal.checked = request.mask === "causal" || request.mask === "padding_causal";
  form.scale.checked = request.scale !== false;
  setMaskFill(request.mask_fill);
}

// The select offers -inf and the seeds' fills; another value from a preset is added.
function setMaskFill(value) {
  const text = typeof value === "number" ? value.toExponential().replace("e+", "e") : String(value);
  const known = [...form.mask_fill.options].find(
    (o) => o.value === text || Number(o.value) === Number(text),
  );
  if (!known) {
    const option = document.createElement("option");
    option.value = text;
    option.textContent = text;
    form.mask_fill.append(option);
  }
  form.mask_fill.value = known ? known.value : text;
}

function nonEmptyLines(text) {
  return text.split("\n").map((line) => line.trim()).filter((line) => line.length > 0);
}

// All lines are token ids when every token of every line is an integer;
// otherwise every line is sent as words.
function readRequest() {
  const sources = nonEmptyLines(form.sequences.value);
  const targets = nonEmptyLines(form.targets.value);
  const allTokens = sources.concat(targets).flatMap((line) => line.split(/\s+/));
  const asIds = allTokens.length > 0 && allTokens.every((token) => INT_TOKEN.test(token));
  const encode = (line) => (asIds ? line.split(/\s+/).map(Number) : line);
  const padding = form.mask_padding.checked;
  const causal = form.mask_causal.checked;
  const mask = padding && causal ? "padding_causal" : padding ? "padding" : causal ? "causal" : "none";
  const fill = form.mask_fill.value;
  const request = {
    sequences: sources.map(encode),
    mask: mask,
    mask_fill: fill === "-inf" ? fill : Number(fill),
    scale: form.scale.checked,
    device: form.device.value,
  };
  for (const name of ["d_model", "num_heads", "seed", "pad_id", "vocab_size"]) {
    const raw = form[name].value.trim();
    // Sent as typed (a number when it parses), so that the API names the field on error.
    request[name] = raw === "" || Number.isNaN(Number(raw)) ? raw : Number(raw);
  }
  if (targets.length > 0) {
    request.targets = targets.map(encode);
  }
  return request;
}

const errors = errorBox(document.getElementById("error"));
const showError = errors.show;
const clearError = errors.clear;

// POST or GET JSON; on an HTTP error, shows the API's message by the form and
// returns null.
function fetchJson(url, body) {
  return fetchApi(url, body, showError);
}

function writeUrl(request) {
  writeUrlState({ ...request, verify: form.verify.checked }, state.view);
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
    const body = await fetchJson("/api/v1/attention", {
      ...request, ...COMPACT, verify: form.verify.checked, display_size: DISPLAY_SIZE,
    });
    if (body === null) return;
    const received = performance.now();
    state.response = body;
    state.request = request;
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
  } finally {
    clearTimeout(showProgress);
    progress.hidden = true;
    computeButton.disabled = false;
  }
}

function populateSelectors(data) {
  const previous = Number(sequenceSelect.value || 0);
  sequenceSelect.replaceChildren();
  data.key_labels.forEach((labels, b) => {
    const option = document.createElement("option");
    option.value = String(b);
    const preview = labels.filter((t) => t !== "<pad>").slice(0, 6).join(" ");
    option.textContent = `${b}: ${preview}${labels.length > 6 ? " …" : ""}`;
    sequenceSelect.append(option);
  });
  sequenceSelect.value = String(previous < data.shape[0] ? previous : 0);
  const previousHead = Number(headSelect.value || 0);
  headSelect.replaceChildren();
  for (let h = 0; h < data.shape[1]; h += 1) {
    const option = document.createElement("option");
    option.value = String(h);
    option.textContent = `Head ${h}`;
    headSelect.append(option);
  }
  headSelect.value = String(previousHead < data.shape[1] ? previousHead : 0);
}

function describe(data) {
  const [B, H, Lq, Lk] = data.full_shape;
  const [, , shownQ, shownK] = data.shape;
  const fullyMasked = data.fully_masked.flat().filter(Boolean).length;
  const parts = [
    `${data.attention === "cross" ? "Cross" : "Self"}-attention`,
    `weights (B, H, L_q, L_k) = (${B}, ${H}, ${Lq}, ${Lk})`,
    `d_model ${data.d_model}, d_k ${data.d_k}`,
    `mask ${data.mask} (fill ${data.mask_fill})`,
    data.scale ? "scaled by 1/√d_k" : "NOT scaled by 1/√d_k",
    `${data.num_parameters.toLocaleString()} attention parameters`,
    `${data.device} ${data.dtype}, ${data.compute_ms.toFixed(2)} ms`,
  ];
  if (fullyMasked > 0) {
    const rule = data.mask_fill === "-inf" ? "weights set to 0" : "uniform weights (finite fill)";
    parts.push(`${fullyMasked} fully-masked query row(s): ${rule}`);
  }
  if (data.downsample) {
    const d = data.downsample;
    parts.push(`drawn as ${shownQ} × ${shownK} blocks of ${d.factor_q} × ${d.factor_k} (block ` +
      `${d.method}) of the full ${d.full_shape[2]} × ${d.full_shape[3]}: click a head for full resolution`);
  }
  return parts.join(" · ");
}

function formatDiff(x) {
  return x === 0 ? "0" : x.toExponential(1);
}

function renderBadge(data) {
  const badge = document.getElementById("verify-badge");
  const v = data.verification;
  if (!v) {
    badge.hidden = true;
    return;
  }
  const largest = Math.max(v.mha_weights_max_abs_diff, v.mha_output_max_abs_diff,
    v.sdpa_output_max_abs_diff);
  badge.textContent = v.matches
    ? `✓ matches PyTorch (max |Δ| = ${formatDiff(largest)})`
    : `✗ differs from PyTorch (max |Δ| = ${formatDiff(largest)} > ${formatDiff(v.tolerance)})`;
  badge.className = v.matches ? "badge ok" : "badge bad";
  badge.title = [
    `torch ${v.torch_version}, tolerance ${v.tolerance}`,
    `nn.MultiheadAttention weights: ${formatDiff(v.mha_weights_max_abs_diff)}`,
    `nn.MultiheadAttention output: ${formatDiff(v.mha_output_max_abs_diff)}`,
    `scaled_dot_product_attention output: ${formatDiff(v.sdpa_output_max_abs_diff)}`,
    `fully-masked rows compared under AttnViz's rule: ${v.fully_masked_rows}`,
  ].join("\n");
  badge.hidden = false;
}

async function renderHeads(data, b) {
  clearPlots(headsContainer);
  clearPlots(zoomContainer);
  let zmax = 0;
  for (const head of data.weights[b]) zmax = Math.max(zmax, maxOf(head));
  const numHeads = data.shape[1];
  const plots = [];
  for (let h = 0; h < numHeads; h += 1) {
    const figure = heatmapFigure({
      z: visibleWeights(data.weights[b][h], data.attn_mask[b]),
      rowLabels: data.query_labels[b],
      colLabels: data.key_labels[b],
      title: `Head ${h}`,
      zmin: 0,
      zmax: zmax > 0 ? zmax : 1,
      showscale: h === numHeads - 1,
      valueName: "weight",
      maskedNote: "masked: weight 0",
    });
    const div = addPlot(headsContainer, figure, "head-plot");
    div.dataset.head = String(h);
    if (data.downsample) {
      div.classList.add("zoomable");
      div.drawn.then(() => div.on("plotly_click", () => zoomHead(b, h)));
    }
    plots.push(div.drawn);
  }
  await Promise.all(plots);
  headsContainer.dataset.drawnSequence = String(b);
  headsContainer.dataset.drawnHeads = String(numHeads);
}

// One head of one sequence at full resolution (up to ZOOM_SIZE per side).
async function zoomHead(b, h) {
  const res = await fetchJson("/api/v1/attention", {
    ...state.request, ...COMPACT, sequence_index: b, head_index: h, display_size: ZOOM_SIZE,
  });
  if (!res) return;
  clearPlots(zoomContainer);
  const [, , Lq, Lk] = res.shape;
  const title = res.downsample
    ? `Head ${h}, sequence ${b}: ${Lq} × ${Lk} blocks (block ${res.downsample.method})`
    : `Head ${h}, sequence ${b}: full resolution ${Lq} × ${Lk}`;
  const div = addPlot(zoomContainer, heatmapFigure({
    z: visibleWeights(res.weights[0][0], res.attn_mask[0]),
    rowLabels: res.query_labels[0], colLabels: res.key_labels[0], title,
    zmin: 0, valueName: "weight", maskedNote: "masked: weight 0",
  }), "plot zoom-plot");
  await div.drawn;
  zoomContainer.dataset.head = String(h);
}

async function renderView() {
  const data = state.response;
  if (!data) return;
  const b = Number(sequenceSelect.value || 0);
  const h = Number(headSelect.value || 0);
  summary.textContent = describe(data);
  renderBadge(data);
  for (const tab of tabs) {
    const active = tab.dataset.view === state.view;
    tab.setAttribute("aria-selected", String(active));
    document.getElementById(`view-${tab.dataset.view}`).hidden = !active;
  }
  const view = VIEWS[state.view];
  headControl.hidden = !(view && view.usesHead);
  const container = document.getElementById(`view-${state.view}`);
  container.dataset.drawn = "false";
  if (state.view === "heads") {
    await renderHeads(data, b);
  } else {
    clearError();
    await view.render(container.querySelector(".view-body"), {
      data, request: state.request, sequence: b, head: h, fetchJson,
    });
  }
  container.dataset.drawn = "true";
}

function selectPreset(name) {
  const preset = presets.find((p) => p.name === name) || presets[0];
  presetSelect.value = preset.name;
  presetDescription.textContent = preset.description;
  fillForm(preset.request);
}

for (const preset of presets) {
  const option = document.createElement("option");
  option.value = preset.name;
  option.textContent = preset.title;
  presetSelect.append(option);
}

presetSelect.addEventListener("change", () => {
  selectPreset(presetSelect.value);
  compute();
});
form.addEventListener("submit", (event) => {
  event.preventDefault();
  compute();
});
sequenceSelect.addEventListener("change", renderView);
headSelect.addEventListener("change", renderView);
for (const tab of tabs) {
  tab.addEventListener("click", () => {
    state.view = tab.dataset.view;
    if (state.request) writeUrl(state.request);
    renderView();
  });
}
document.getElementById("download-json").addEventListener("click", () => {
  if (!state.response) return;
  const body = JSON.stringify({ request: state.request, response: state.response });
  download("attnviz.json", new Blob([body], { type: "application/json" }));
});
bindImageDownloads(() => state.view, "attnviz");
for (const container of document.querySelectorAll(".view-controls")) {
  container.addEventListener("change", renderView);
}

window.attnviz = { lastResponse: null, compute: compute };
const shared = await readUrlRequest(ATTENTION_LINK_FIELDS);
const sharedView = window.location.hash.slice(1);
if (sharedView in VIEWS || sharedView === "heads") state.view = sharedView;
if (shared && Array.isArray(shared.sequences)) {
  selectPreset(defaultPreset);
  presetDescription.textContent = "From the link.";
  fillForm({ ...presets[0].request, ...shared });
  if (shared.verify === false) form.verify.checked = false;
} else {
  selectPreset(defaultPreset);
}
compute();
