// AttnViz pretrained-model page: typed text through a real transformer (an encoder
// such as BERT, a decoder LLM such as SmolLM2, or an encoder-decoder); every layer's
// and head's attention (BertViz's model view), one layer's heads, the averages and
// attention rollout, and a token explorer: one token's row in every layer and head, and
// for decoders the generated tokens and the next-token candidates.
import {
  COMPACT, MODELS_LINK_FIELDS, PROGRESS_DELAY_MS, bindDownloads, bindLinkSettings, busy,
  decodeArrays, errorBox, errorText, fillIndexSelect, jsonFetcher, linkedTokens, nonEmptyLines, onTabClick,
  openTab, option, paragraph, parseNumber, readUrlRequest, selectLinked, selectedIndex,
  settingsFromUrl, viewFromUrl, writeLinkSettings, writeUrlState,
} from "./api.js";
import {
  addPlot, clearPlots, fillColourScales, heatmapFigure,
  resolveScale, thumbnailGrid, thumbnailPreview, tiledGrid, tokenHover,
} from "./heatmap.js";
import {
  additive, fillHeadChoice, focusToken, nextSelection, outline, selectionShapes,
  shadedWeights, tokenStrip,
} from "./tokens.js";
import { bindMedia, computeMedia, mediaModality, showMediaInputs } from "./media.js";
import { lineView, neuronView } from "./tokenviews.js";
import { displayToken, displayTokens } from "./lib/display.js";
import { drawAtlas, fetchAtlas, saveAtlas } from "./atlas.js";
import { readLines } from "./lib/ndjson.js";

const ATTENTION_URL = "/api/v1/models/attention";
// The overview streamed: NDJSON lines, a "start" (every field but the maps), one "layer"
// per layer as soon as the server has it, an "end" (the averages) or an "error".
const LAYERS_URL = "/api/v1/models/attention/layers";
const MODELS_URL = "/api/v1/models";
const DEFAULT_TEXT = "The cat sat on the mat because it was tired.";
const DEFAULT_PROMPT = "What is the capital of France?";
const DEFAULT_TARGET = "Le chat était assis sur le tapis.";
const DEFAULT_NEW_TOKENS = 8;
// What the server says, not repeated here (templates/models.html, from the request
// schema's bounds and attnviz.pretrained.methods): the methods, the gradient methods, the
// most next-token candidates a response carries.
const CONFIG = JSON.parse(document.getElementById("models-config").textContent);
const TOP_K = Math.min(5, CONFIG.max_top_k); // next-token candidates shown per position
const POLL_MS = 1500; // how often the model list is asked again while a model loads

const form = document.getElementById("model-form");
const modelSelect = document.getElementById("model");
const colourScale = document.getElementById("colour-scale");
const tokenBox = document.getElementById("token-box");
const mergeWords = document.getElementById("merge-words");
const neuronHead = document.getElementById("neuron-head");
const compareSentence = document.getElementById("compare-sentence");
const compareHead = document.getElementById("compare-head");
const compareModel = document.getElementById("compare-model");
const shadeHead = document.getElementById("shade-head");
const shadeLayer = document.getElementById("shade-layer");
const queryStrip = document.getElementById("query-strip");
const keyStrip = document.getElementById("key-strip");
const modelDescription = document.getElementById("model-description");
const pathNote = document.getElementById("path-note");
const textsBox = document.getElementById("texts");
const textsLabel = document.getElementById("texts-label");
const textsHint = document.getElementById("texts-hint");
const chatControl = document.getElementById("chat-control");
const chatBox = document.getElementById("chat");
const chatHint = document.getElementById("chat-hint");
const pairsControl = document.getElementById("pairs-control");
const pairsBox = document.getElementById("text-pairs");
const targetsControl = document.getElementById("targets-control");
const targetsBox = document.getElementById("targets");
const blockSelect = document.getElementById("block");
const generationControl = document.getElementById("generation-control");
const newTokensInput = document.getElementById("max-new-tokens");
const temperatureInput = document.getElementById("temperature");
const seedInput = document.getElementById("seed");
const deviceSelect = document.getElementById("device");
const summary = document.getElementById("summary");
const displayNote = document.getElementById("display-note");
const sequenceLabel = document.getElementById("sequence-label");
const sequenceSelect = document.getElementById("sequence-index");
const layerSelect = document.getElementById("layer-index");
const layerControl = document.getElementById("layer-control");
const hideSpecial = document.getElementById("hide-special");
const methodSelect = document.getElementById("method");
const ablateInput = document.getElementById("ablate");
const restoreHeads = document.getElementById("restore-heads");
const ablationNote = document.getElementById("ablation-note");
const methodNote = document.getElementById("method-note");
const targetSelect = document.getElementById("target-index");
const targetControl = document.getElementById("target-control");
const importanceBox = document.querySelector("#view-model .importance");
const hideSpecialControl = document.getElementById("hide-special-control");
const specialExamples = document.getElementById("special-examples");
const computeButton = document.getElementById("compute");
const controls = document.querySelector(".results .controls");
const layerProgressBox = document.getElementById("layer-progress");
const layerProgressLabel = document.getElementById("layer-progress-label");
const layerProgressBar = document.getElementById("layer-progress-bar");
const layerProgressFill = layerProgressBar.querySelector(".layer-progress-fill");
const generationTab = document.querySelector(".tabs button[data-view=generation]");
const resultsPane = document.querySelector(".results");
const staleNote = document.getElementById("stale-note");
const refreshButton = document.getElementById("refresh");

const THUMB_SIZE = 64; // thumbnails of longer inputs come block-max pooled to this size
// Narrower than this (px), the model view's columns are numbered 0, 1, ... instead of
// H0, H1, ...: twelve "H10"-wide labels do not fit side by side on a phone.
const NARROW_GRID = 560;
const STRIP_COLUMNS = 10; // the most layers a row of the averages' strip
// The model view's thumbnails on a narrow screen (modelGrid): at least MIN_THUMB_PX wide
// (the grid scrolls sideways beyond), square below SQUARE_THUMB_PX; GRID_FRAME_PX is
// what the row titles and the colour bar take.
const MIN_THUMB_PX = 36;
const SQUARE_THUMB_PX = 60;
const GRID_FRAME_PX = 180;
const state = {
  listing: null, models: [], request: null, view: "model", overview: null, overviewKey: null,
  overviewRequest: null, layers: new Map(), heads: new Map(), ticket: 0,
  // The overview's stream in flight (streamOverview), when the last one's answer ended
  // (performance.now()), and when the model view drew its first layer and its whole grid.
  stream: null, responseAt: null, firstLayerAt: null, gridAt: null, computes: 0,
  answeredAt: null, // when the latest attention request was answered (viewTimings)
  shownAt: null, // when the open view's maps on screen were drawn, if before the others
  selected: new Set(), // the selected query positions among the shown tokens (tokens.js)
  selectionTokens: null, // the tokens the selection counts in (a new input clears it)
  // The token explorer: the chosen query position, its responses by request, a ticket.
  queryIndex: null, queries: new Map(), queryBase: null, queryTicket: 0,
  pending: null, // the model whose loading a computation waits for
  pollTimer: null, specials: new Map(),
  // The shared link's request, and the model whose family's defaults the form has.
  link: null, adaptedFor: null,
  linked: {}, // the link's view settings (api.js), applied to the first response
  // The request (JSON) whose results are on screen, null when none: the form differing
  // from it marks them out of date (updateStale).
  shown: null,
  excludeSink: false, // the averages and rollout without the first token (attentionSink)
  layerHead: 0, // the head the layer view enlarges
  // The head atlas: atlases by request (JSON), the one shown and its request.
  atlases: new Map(), atlas: null, atlasRequest: null,
  atlasFetch: null, // the atlas being computed: {key, controller, progress, promise}
};

const errors = errorBox(document.getElementById("error"));
const showError = errors.show;
const clearError = errors.clear;

// The progress of a streamed overview (#layer-progress, in #progress's place): "Running
// the model…" until its first layer, then "Layer k of N…", then "Drawing the grid…" while
// the model view draws it; shown once the stream has lasted PROGRESS_DELAY_MS, hidden when
// its grid is drawn (or, when no grid waits for it, when it ends). Owned by one stream: a
// newer one takes it over.
// A progress box's label and bar (the streamed grid's, the head atlas's): `text`, `done`
// of `total` steps (null, or no total: not known yet, the bar waits).
function drawProgress({ label, bar, fill }, text, done, total) {
  label.textContent = text;
  if (total) bar.setAttribute("aria-valuemax", String(total));
  else bar.removeAttribute("aria-valuemax");
  if (done === null || !total) {
    bar.removeAttribute("aria-valuenow");
    fill.style.width = "";
  } else {
    bar.setAttribute("aria-valuenow", String(done));
    fill.style.width = `${(100 * done) / total}%`;
  }
  bar.setAttribute("aria-valuetext", text.replace(/…$/u, ""));
}

const layerProgress = {
  owner: null,
  timer: null,
  begin(stream, text, total) {
    clearTimeout(this.timer);
    this.owner = stream;
    this.set(stream, text, null, total);
    this.timer = setTimeout(() => {
      if (this.owner === stream) layerProgressBox.hidden = false;
    }, PROGRESS_DELAY_MS);
  },
  // `done` of `total` layers (null: not known yet, the bar waits).
  set(stream, text, done, total) {
    if (this.owner !== stream) return;
    drawProgress({ label: layerProgressLabel, bar: layerProgressBar, fill: layerProgressFill },
      text, done, total);
  },
  end(stream) {
    if (this.owner !== stream) return;
    clearTimeout(this.timer);
    this.owner = null;
    layerProgressBox.hidden = true;
  },
};

// ---------------------------------------------------------------------------
// The models on offer and their loading.

function modelInfo(name) {
  return state.models.find((m) => m.name === name) || null;
}

function selectedModel() {
  return modelInfo(modelSelect.value);
}

function family(model) {
  return (model && model.family) || "encoder";
}

function formatCount(n) {
  if (n >= 1e9) return `${(n / 1e9).toFixed(2)}B`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
  return n.toLocaleString();
}

// "3 key/value heads (grouped-query: 3 query heads each)", or null without grouping.
function groupedQueryText(numHeads, numKv) {
  if (!numKv || numKv >= numHeads) return null;
  const per = numHeads / numKv;
  if (numKv === 1) return `1 key/value head (multi-query: all ${numHeads} query heads share it)`;
  return `${numKv} key/value heads (grouped-query: ${per} query heads each)`;
}

function descriptionOf(m) {
  if (!m) return "";
  if (m.state === "loading") return `Loading… (${m.source}); it can be chosen once it is ready.`;
  if (m.state === "failed") return `Failed to load: ${m.error || "no reason given"} (${m.source})`;
  const parts = [
    `${m.family}, ${m.architecture}`,
    `${m.num_layers} layers × ${m.num_heads} heads`,
  ];
  const grouped = groupedQueryText(m.num_heads, m.num_key_value_heads);
  if (grouped) parts.push(grouped);
  parts.push(`d_model ${m.d_model}`, `${formatCount(m.num_parameters)} parameters`);
  parts.push(m.max_tokens ? `up to ${m.max_tokens.toLocaleString()} tokens` : "no position limit");
  if (m.chat_template) parts.push("chat template");
  return `${parts.join(" · ")}; from ${m.source}`;
}

function optionText(m) {
  if (m.state === "loading") return `${m.name} (loading…)`;
  if (m.state === "failed") return `${m.name} (failed)`;
  return m.name;
}

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

function describeModel() {
  const m = selectedModel();
  modelDescription.textContent = descriptionOf(m);
  modelDescription.dataset.state = m ? m.state : "";
  // A family whose attention modules bypass transformers' attention interface (GPT-Neo,
  // BLOOM) is drawn from its own output_attentions: say so, and what that costs.
  const own = m && m.attention_path === "output_attentions";
  pathNote.hidden = !own;
  pathNote.textContent = own ? `${m.attention_note}.` : "";
}

function applyListing(listing) {
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
function pollModels() {
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
function waitForModel(name) {
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
  compute();
}

// POST to the attention endpoint. A model still loading (503, type "loading") is not an
// error: the page waits for it (waitForModel) and the result is null, as it is after an
// error, which is then shown in the error box.
async function requestAttention(body) {
  let message = null;
  const res = await jsonFetcher((text) => { message = text; })(ATTENTION_URL, body);
  state.answeredAt = performance.now();
  if (res !== null) return res;
  await refused(body.model, message);
  return null;
}

// The API refused a request for `model` with `message`: a model still loading waits
// (waitForModel), anything else is shown in the error box.
async function refused(model, message) {
  const listing = await fetchListing();
  if (listing) applyListing(listing);
  const m = modelInfo(model);
  if (m && m.state === "loading") {
    waitForModel(m.name);
    return;
  }
  showError(message);
}

// ---------------------------------------------------------------------------
// The form: its inputs follow the chosen model's family.

// Text and number fields of a shared link that MODELS_LINK_FIELDS does not check.
const isBoolean = (v) => typeof v === "boolean";
const isCount = (v) => Number.isInteger(v) && v >= 0;
const isNumber = (v) => typeof v === "number" && Number.isFinite(v);
const isStrings = (v) => Array.isArray(v) && v.every((t) => typeof t === "string");
const BLOCKS = ["encoder", "decoder", "cross"];

// Show the inputs of the chosen model's family. `defaults`: also reset the family's
// defaults (the chat box, the example text) as a newly chosen model gets them.
function adaptInputs(defaults) {
  const m = selectedModel();
  showMediaInputs(m);
  const fam = family(m);
  const decoder = fam === "decoder";
  const encDec = fam === "encoder-decoder";
  const known = Boolean(m && m.family); // a model still loading has no family yet
  textsLabel.textContent = decoder ? "Prompts" : (encDec ? "Texts (encoder input)" : (known ? "Sentences" : "Texts"));
  textsHint.textContent = decoder
    ? "one per line; the model's tokenizer splits them, and it continues each"
    : "one per line; the model's own tokenizer splits them";
  sequenceLabel.textContent = decoder ? "Prompt" : (encDec || !known ? "Text" : "Sentence");
  chatControl.hidden = !decoder;
  const hasTemplate = Boolean(m && m.chat_template);
  const ready = Boolean(m && m.state === "ready");
  chatBox.disabled = !hasTemplate;
  chatHint.textContent = hasTemplate
    ? "each prompt becomes a user message in the model's chat template (its special " +
      "tokens and the assistant's opening included)"
    : "this model has no chat template: prompts are used as typed";
  // Until the model is ready its template is unknown: the box keeps its state.
  if (ready && !hasTemplate) chatBox.checked = false;
  else if (ready && defaults) chatBox.checked = true;
  if (!ready && m && state.adaptedFor === m.name) state.adaptedFor = null;
  pairsControl.hidden = decoder || encDec || !known;
  targetsControl.hidden = !encDec;
  generationControl.hidden = !decoder;
  if (encDec && m && m.blocks) {
    for (const opt of blockSelect.options) opt.disabled = !m.blocks.includes(opt.value);
  }
  generationTab.textContent = decoder ? "Generation" : "Token explorer";
  if (defaults) {
    const text = textsBox.value.trim();
    if (decoder && (text === DEFAULT_TEXT || text === "")) textsBox.value = DEFAULT_PROMPT;
    if (!decoder && (text === DEFAULT_PROMPT || text === "")) textsBox.value = DEFAULT_TEXT;
    if (encDec && targetsBox.value.trim() === "") targetsBox.value = DEFAULT_TARGET;
    if (decoder && newTokensInput.value.trim() === "") newTokensInput.value = String(DEFAULT_NEW_TOKENS);
  }
  if (defaults && m && m.state === "ready") state.adaptedFor = m.name;
  showSpecialExamples(m ? m.name : null);
}

function readRequest() {
  const m = selectedModel();
  const fam = family(m);
  const texts = nonEmptyLines(textsBox.value);
  const request = { model: modelSelect.value || null, texts, device: deviceSelect.value };
  if (fam === "decoder") {
    request.chat = chatBox.checked && !chatBox.disabled;
    request.max_new_tokens = parseNumber(newTokensInput.value);
    request.temperature = parseNumber(temperatureInput.value);
    request.seed = parseNumber(seedInput.value);
    return request;
  }
  if (fam === "encoder-decoder") {
    request.targets = nonEmptyLines(targetsBox.value);
    request.block = blockSelect.value;
    return request;
  }
  const pairs = pairsBox.value.split("\n").map((t) => (t.trim() === "" ? null : t.trim()));
  while (pairs.length && pairs[pairs.length - 1] === null) pairs.pop();
  if (pairs.length) {
    while (pairs.length < texts.length) pairs.push(null);
    request.text_pairs = pairs;
  }
  return request;
}

// Fill the form from a request (a shared link's, or the default). The link's fields
// beyond MODELS_LINK_FIELDS are used only when they have the right type.
function fillForm(request) {
  if (request.model && modelInfo(request.model)) modelSelect.value = request.model;
  adaptInputs(true);
  const decoder = family(selectedModel()) === "decoder";
  textsBox.value = (request.texts || [decoder ? DEFAULT_PROMPT : DEFAULT_TEXT]).join("\n");
  pairsBox.value = (request.text_pairs || []).map((p) => p ?? "").join("\n");
  if (request.device) deviceSelect.value = request.device;
  fillOptions(request);
}

// The options of a request beyond the texts: decoders' and encoder-decoders'.
function fillOptions(request) {
  if (isBoolean(request.chat) && !chatBox.disabled) chatBox.checked = request.chat;
  if (isCount(request.max_new_tokens)) newTokensInput.value = String(request.max_new_tokens);
  if (isNumber(request.temperature)) temperatureInput.value = String(request.temperature);
  if (isCount(request.seed)) seedInput.value = String(request.seed);
  if (isStrings(request.targets)) targetsBox.value = request.targets.join("\n");
  if (BLOCKS.includes(request.block)) blockSelect.value = request.block;
}


// The special tokens of a response (those its special_tokens_mask marks), kept per model
// for the "hide special tokens" hint.
function rememberSpecials(res) {
  if (res.hidden_special_tokens) return;
  const seen = [];
  res.tokens[0].forEach((token, i) => {
    if (res.special_tokens_mask[0][i] && !seen.includes(token)) seen.push(token);
  });
  if (seen.length) state.specials.set(res.model, seen);
  showSpecialExamples(res.model);
}

function showSpecialExamples(name) {
  const seen = state.specials.get(name);
  specialExamples.textContent = seen ? `(${seen.slice(0, 4).join(", ")})` : "";
}

// ---------------------------------------------------------------------------
// Requests of the views.

// The server does the per-input work: the input runs alone (no [PAD]), special tokens
// are hidden there (rows renormalised), and thumbnails of long inputs come pooled.
function viewRequest(extra) {
  return {
    ...state.request,
    ...COMPACT,
    sequence_index: selectedIndex(sequenceSelect),
    // Hiding and merging renormalise weights: not with another method (the API refuses),
    // nor with heads off (its positions count every token).
    hide_special_tokens: hideSpecial.checked && !otherMethod() && !ablatedHeads().length,
    merge_words: mergeWords.checked && !otherMethod() && !ablatedHeads().length,
    // A whole-model method is drawn in one view only (METHOD_VIEWS): the other views ask
    // for the weights, so a long input past flow's bound still shows them there.
    method: requestedMethod(),
    ...(GRADIENT_METHODS.has(requestedMethod()) && chosenTarget() !== ""
      ? { target_index: Number(chosenTarget()) } : {}),
    ...(ablatedHeads().length ? { ablate: ablatedHeads() } : {}),
    ...extra,
  };
}

// The overview of the selected input: every layer and head (pooled to THUMB_SIZE when
// longer), the averages and rollout. Fetched again when the input or the hiding changes,
// streamed layer by layer (streamOverview): `watcher` (the model view's, or null) is told
// of each layer as it comes. A request for the same input while it streams joins that
// stream; one for another input cancels it. Resolves to the whole response, the one-input
// response of POST /attention, or null (refused, failed, or cancelled by a newer one).
async function overview(watcher = null) {
  const body = viewRequest({ display_size: THUMB_SIZE });
  const key = JSON.stringify(body);
  if (state.overviewKey === key) return state.overview;
  let stream = state.stream;
  if (stream === null || stream.key !== key) {
    if (stream !== null) stream.controller.abort();
    stream = streamOverview(body, key);
  }
  stream.watch(watcher);
  return stream.promise;
}

// POST body to LAYERS_URL and read its lines as they come (fetch, the body's reader, a
// TextDecoder): the response is assembled as POST /attention's one-input response
// (attentions (N, 1, H, P_q, P_k), head_mean (N, 1, P_q, P_k), ...), and the stream's
// watcher (watch: the model view while it is open) told of its start and of each layer.
// Returns the stream: {key, body, controller (abort() cancels it), res (so far), layers
// (received), total, promise, watch(watcher)}; its promise resolves to the response, or
// null once the error is shown (a refusal: as requestAttention's) or it was cancelled.
function streamOverview(body, key) {
  const model = modelInfo(body.model);
  const stream = {
    key, body, controller: new AbortController(), res: null, layers: 0,
    total: model && model.num_layers, watcher: null, promise: null, final: null,
    // The newest view that waits for it: told of the start and the layers so far, then of
    // each new one.
    watch(watcher) {
      stream.watcher = watcher;
      if (!watcher || stream.res === null) return;
      watcher.start(stream);
      for (let l = 0; l < stream.layers; l += 1) watcher.layer(stream, l);
    },
  };
  state.stream = stream;
  const generating = family(model) === "decoder" && body.max_new_tokens > 0;
  layerProgress.begin(stream, generating ? "Generating, then running the model…" : "Running the model…",
    stream.total);
  stream.promise = readStream(stream).then((res) => {
    if (state.stream === stream) state.stream = null;
    stream.final = res;
    // No view draws it: the progress ends with the answer (else with the drawn grid).
    if (res === null || !drawsIt(stream)) layerProgress.end(stream);
    if (res === null) return null;
    state.overview = res;
    state.overviewKey = key;
    state.overviewRequest = body;
    state.layers = new Map();
    state.heads = new Map();
    window.attnvizModels.lastResponse = res;
    rememberSpecials(res);
    return res;
  });
  return stream;
}

// Whether the model view waits to draw the stream's grid.
function drawsIt(stream) {
  return Boolean(stream.watcher && stream.watcher.current());
}

async function readStream(stream) {
  const { signal } = stream.controller;
  try {
    const response = await fetch(LAYERS_URL, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(stream.body),
      signal,
    });
    if (!response.ok) {
      const data = await response.json().catch(() => null);
      if (signal.aborted) return null;
      await refused(stream.body.model, errorText(data, response.status));
      return null;
    }
    // The "end" or "error" line is the last (takeLine: the result, or null).
    const result = await readLines(response, (line) => takeLine(stream, line));
    if (result !== undefined) return result;
    showError(`The answer ended after ${stream.layers} of ${stream.total ?? "?"} layers; ` +
      "compute again.");
    return null;
  } catch (err) {
    if (signal.aborted) return null;
    showError(`Request failed: ${err}`);
    return null;
  }
}

// One line of the stream: undefined while more are to come, else the assembled response
// (the "end" line) or null (an "error" line, shown).
function takeLine(stream, line) {
  if (line.type === "start") {
    const { type, ...fields } = decodeArrays(line);
    stream.res = { ...fields, attentions: [], head_mean: [] };
    stream.total = fields.num_layers;
    layerProgress.set(stream, `Layer 0 of ${stream.total}…`, 0, stream.total);
    if (stream.watcher) stream.watcher.start(stream);
    return undefined;
  }
  if (line.type === "layer") {
    const l = stream.layers;
    stream.res.attentions.push([decodeArrays(line.attentions)]);
    stream.res.head_mean.push([decodeArrays(line.head_mean)]);
    stream.layers += 1;
    layerProgress.set(stream, `Layer ${stream.layers} of ${stream.total}…`, stream.layers, stream.total);
    if (stream.watcher) stream.watcher.layer(stream, l);
    return undefined;
  }
  if (line.type === "end") {
    state.responseAt = performance.now();
    state.answeredAt = state.responseAt;
    const end = decodeArrays(line);
    const { attentions, head_mean: headMean, ...start } = stream.res;
    if (attentions.length !== end.shape[0]) {
      showError(`The answer had ${attentions.length} of ${end.shape[0]} layers; compute again.`);
      return null;
    }
    if (drawsIt(stream)) layerProgress.set(stream, "Drawing the grid…", stream.total, stream.total);
    // The fields in POST /attention's order (Download JSON saves it as it is).
    // A pass run while the layers streamed sends its time and next tokens last.
    for (const late of ["compute_ms", "next_tokens"]) if (late in end) start[late] = end[late];
    return {
      ...start, shape: end.shape, attentions, head_mean: headMean, layer_mean: end.layer_mean,
      rollout: end.rollout, special_share: end.special_share,
      average_downsample: end.average_downsample,
    };
  }
  if (line.type === "error") {
    showError(String(line.detail));
    return null;
  }
  return undefined; // a kind of line this page does not know: skipped
}

// Full-resolution maps of layer l: {attentions: H x L x L, headMean: L x L}; from the
// overview when it is not pooled, else fetched once per layer.
async function layerMaps(res, l) {
  if (!res.downsample) return { attentions: res.attentions[l][0], headMean: res.head_mean[l][0] };
  if (!state.layers.has(l)) {
    const layer = await requestAttention(viewRequest({ layer_index: l }));
    if (layer === null) return null;
    state.layers.set(l, { attentions: layer.attentions[0][0], headMean: layer.head_mean[0][0] });
  }
  return state.layers.get(l);
}

// One head's full-resolution map: from the overview when it is not pooled, from a layer
// already fetched, else only that head (layer_index and head_index).
async function headMap(res, l, h) {
  if (!res.downsample) return res.attentions[l][0][h];
  if (state.layers.has(l)) return state.layers.get(l).attentions[h];
  const key = `${l},${h}`;
  if (!state.heads.has(key)) {
    const head = await requestAttention(viewRequest({ layer_index: l, head_index: h }));
    if (head === null) return null;
    state.heads.set(key, head.attentions[0][0][0]);
  }
  return state.heads.get(key);
}

// ---------------------------------------------------------------------------
// Grouped-query attention: query head h reads key/value head floor(h / (H / H_kv)).

function kvGroups(res) {
  const kv = res.num_key_value_heads || res.num_heads;
  return kv < res.num_heads ? { kv, per: res.num_heads / kv } : null;
}

function headName(res, l, h) {
  const groups = kvGroups(res);
  if (!groups) return `layer ${l}, head ${h}`;
  const g = Math.floor(h / groups.per);
  const first = g * groups.per;
  return `layer ${l}, head ${h} · key/value head ${g} (shared by heads ${first}–${first + groups.per - 1})`;
}

function headTitle(res, l, h) {
  const groups = kvGroups(res);
  return groups ? `Layer ${l}, head ${h} · kv head ${Math.floor(h / groups.per)}` : `Layer ${l}, head ${h}`;
}

// ---------------------------------------------------------------------------
// Text around the figures.

const BLOCK_WORDS = {
  encoder: "encoder self-attention",
  decoder: "decoder self-attention (causal)",
  cross: "cross-attention (decoder queries, encoder keys)",
};

function queryTokens(res) {
  return res.tokens[0];
}

function keyTokens(res) {
  return (res.key_tokens || res.tokens)[0];
}

function describe(res) {
  const [, , H] = res.shape;
  const grouped = groupedQueryText(res.num_heads, res.num_key_value_heads);
  const lq = queryTokens(res).length;
  const lk = keyTokens(res).length;
  const parts = [
    `${res.model} (${res.family}, ${res.architecture}): ${res.num_layers} layers × ` +
      `${res.num_heads} heads${grouped ? `, ${grouped}` : ""}, d_model ${res.d_model}`,
  ];
  if (res.family === "encoder-decoder") parts.push(BLOCK_WORDS[res.block]);
  parts.push(`attentions (N, B, H, L_q, L_k) = (${res.shape[0]}, 1, ${H}, ${lq}, ${lk}) for ` +
    `${sequenceLabel.textContent.toLowerCase()} ${res.sequence_index}`);
  if (res.generation) parts.push(generated(res.generation));
  if (res.attention_path === "output_attentions") parts.push("the model's own output_attentions");
  parts.push(`${res.device}, ${res.compute_ms.toFixed(1)} ms`);
  return parts.join(" · ");
}

// "8 tokens generated (greedy) in 0.7 s", for the summaries.
function generated(g) {
  const how = g.temperature > 0 ? `sampled at temperature ${g.temperature}, seed ${g.seed}` : "greedy";
  return `${g.tokens.length} tokens generated (${how}) in ${(g.compute_ms / 1000).toFixed(1)} s`;
}

function noteFor(res) {
  const what = sequenceLabel.textContent;
  const length = queryTokens(res).length;
  const parts = [];
  if (res.generation) {
    const g = res.generation;
    parts.push(`${what} ${res.sequence_index}: ${g.prompt_length} prompt tokens + ` +
      `${g.tokens.length} generated, run alone in one causal pass`);
  } else if (res.block === "cross") {
    parts.push(`${what} ${res.sequence_index}: ${length} target tokens over ` +
      `${keyTokens(res).length} text tokens, run alone (no padding)`);
  } else if (res.family === "encoder-decoder") {
    const side = res.block === "decoder" ? "target" : "text";
    parts.push(`${what} ${res.sequence_index}: ${length} ${side} tokens, run alone (no padding)`);
  } else {
    parts.push(`${what} ${res.sequence_index}: ${length} tokens, run alone (no padding)`);
  }
  if (res.family === "decoder" || res.block === "decoder") {
    parts.push("causal: each token attends to itself and earlier tokens only (the upper " +
      "triangle is empty)");
  }
  if (res.block === "cross") parts.push("rows are target tokens, columns the encoder's tokens");
  if (res.hidden_special_tokens && res.special_share === undefined) {
    parts.push("special tokens hidden: each row is renormalised over the remaining tokens " +
      "so it sums to 1 again");
  } else if (res.hidden_special_tokens) {
    parts.push("special tokens hidden: each row is renormalised over the remaining tokens " +
      `so it sums to 1 again (they took ${(100 * res.special_share).toFixed(1)}% of each row ` +
      "on average, over all layers and heads)");
  }
  if (res.downsample) {
    const d = res.downsample;
    parts.push(`thumbnails pooled to blocks of ${d.factor} × ${d.key_factor ?? d.factor} ` +
      "tokens (block max); enlarged maps and the layer view are full resolution");
  }
  if (res.average_downsample) {
    const d = res.average_downsample;
    parts.push(`the averages and rollout are pooled to blocks of ${d.factor} × ${d.key_factor} tokens`);
  }
  const groups = kvGroups(res);
  if (groups) {
    parts.push(`grouped-query attention: each ${groups.per} consecutive query heads read one ` +
      "key/value head");
  }
  return `${parts.join(" · ")}. Rows are queries, columns keys.`;
}

// The summary line of the token explorer: the model, what was generated, the rows' shape.
function describeQuery(res, q) {
  const grouped = groupedQueryText(res.num_heads, res.num_key_value_heads);
  const parts = [
    `${res.model} (${res.family}, ${res.architecture}): ${res.num_layers} layers × ` +
      `${res.num_heads} heads${grouped ? `, ${grouped}` : ""}, d_model ${res.d_model}`,
  ];
  if (res.family === "encoder-decoder") parts.push(BLOCK_WORDS[res.block]);
  const [N, H, Lk] = [res.query_attentions.length, res.num_heads, res.query_attentions[0][0].length];
  parts.push(`query_attentions (N, H, L_k) = (${N}, ${H}, ${Lk}): token ${q}'s row in every ` +
    "layer and head");
  if (res.generation) parts.push(generated(res.generation));
  if (res.attention_path === "output_attentions") parts.push("the model's own output_attentions");
  parts.push(`${res.device}, ${res.compute_ms.toFixed(1)} ms`);
  return parts.join(" · ");
}

function noteForQuery(res) {
  const what = sequenceLabel.textContent;
  const length = queryTokens(res).length;
  const parts = [];
  if (res.generation) {
    const g = res.generation;
    parts.push(`${what} ${res.sequence_index}: ${g.prompt_length} prompt tokens + ` +
      `${g.tokens.length} generated, run alone in one causal pass`);
  } else if (res.family === "encoder-decoder") {
    const side = res.block === "encoder" ? "text" : "target";
    parts.push(`${what} ${res.sequence_index}: ${length} ${side} tokens, run alone (no padding)`);
  } else {
    parts.push(`${what} ${res.sequence_index}: ${length} tokens, run alone (no padding)`);
  }
  parts.push("every token is shown here, special ones included (greyed)");
  if (res.family === "decoder" || res.block === "decoder") {
    parts.push("causal: a token's row covers itself and the tokens before it");
  }
  return `${parts.join(" · ")}.`;
}

function populateSelectors(request, numLayers) {
  fillIndexSelect(sequenceSelect, request.texts.map(
    (text, b) => `${b}: ${text.length > 40 ? `${text.slice(0, 40)}…` : text}`,
  ));
  fillIndexSelect(layerSelect, Array.from({ length: numLayers }, (_, l) => `Layer ${l}`));
  selectLinked(sequenceSelect, state.linked.sequence);
  selectLinked(layerSelect, state.linked.layer);
  delete state.linked.sequence;
  delete state.linked.layer;
}

// A hint above a figure, as HTML: it wraps on a phone, where a long figure title would
// be cut off at the figure's edge.
function addHint(container, text) {
  return paragraph(container, "hint figure-hint", text);
}

function weightFigure(z, rowLabels, colLabels, title, showscale = true, extra = {}) {
  return heatmapFigure({
    z, rowLabels: displayTokens(rowLabels), colLabels: displayTokens(colLabels), title, zmin: 0,
    showscale, valueName: valueName(), scale: colourMode(rowLabels.length), ...extra,
  });
}

// ---------------------------------------------------------------------------
// The method (#method): what every map holds (the API's `method`).

const METHOD_NOTES = {
  norm: "Norm-based attention (Kobayashi et al., EMNLP 2020, “Attention is Not Only a " +
    "Weight”): every map holds ‖α_ij f(x_j)‖, f(x) = (x W_V + b_V) W_O^h, the weight " +
    "times the length of what key token j's value vector carries through this head into " +
    "the output. Rows no longer sum to 1; there is no rollout, and hiding special tokens " +
    "and merging words are off (they renormalise weights).",
  flow: "Attention flow (Abnar & Zuidema, ACL 2020, “Quantifying Attention Flow in " +
    "Transformers”): the layers as a network whose capacities are the head averages plus " +
    "the residual connection, 0.5 · A + 0.5 · I as in rollout; row i of the map is the " +
    "maximum flow from each input token to token i after the last layer, divided by the " +
    "row's sum. It is in the Averages view beside rollout; the other views show the " +
    "weights. It solves L² max-flow problems, so it is computed for short inputs only.",
};

const GRADIENT_NOTE = " The target T is a decoder's next-token logit at the Target token " +
  "(its most likely next token; by default the last token), or an encoder's output at the " +
  "Target token along the input's mean output (the sentence embedding; by default the " +
  "first token). It takes one more forward and backward pass with eager attention, for " +
  "inputs up to 2^27 attention weights over all layers and heads.";
METHOD_NOTES.grad_rollout = "Gradient-weighted attention rollout (Chefer, Gur & Wolf, ICCV " +
  "2021): per layer Ā = mean over heads of (∂T/∂A ⊙ A)⁺, the weights that push the target " +
  "up, then R = I and R ← R + Ā · R through the layers. The Averages view draws R − I " +
  "(the identity is each token's own residual): row i is how much each input token " +
  "matters to the target through token i. The other views show the weights." + GRADIENT_NOTE;
METHOD_NOTES.head_importance = "Head importance (Michel, Levy & Neubig, NeurIPS 2019, “Are " +
  "Sixteen Heads Really Better than One?”): each head's output is multiplied by a gate ξ = 1, " +
  "and |∂T/∂ξ| is how much the target T would change, to first order, if that head were " +
  "switched off (for a head already off, on). The model view draws it as a layers × heads " +
  "grid under the thumbnails; a click on a cell enlarges that head." + GRADIENT_NOTE;

METHOD_NOTES.value_zeroing = "Value zeroing (Mohebbi, Zuidema, Chrupała & Alishahi, EACL " +
  "2023, “Quantifying Context Mixing in Transformers”): in the chosen layer, token j's value " +
  "vector is set to zero in every head and the layer run again; cell (i, j) is how far token " +
  "i's output of the layer moves (1 − cosine similarity), each row divided by its sum. Unlike " +
  "the weights it counts the whole layer: the value vectors, the output projection, the " +
  "residual connection, the normalisation and the feed-forward network. The Averages view " +
  "draws it beside the layer's head average; the other views show the weights. The layer is " +
  "run once per token, so it is computed for short inputs only.";

// What each per-head method's maps hold (methods absent here leave the weights).
const METHOD_VALUES = { norm: "‖α f(x)‖" };
// The views that draw each whole-model method; the others ask for the weights.
const METHOD_VIEWS = {
  flow: ["averages"], grad_rollout: ["averages", "generation"], head_importance: ["model"],
  value_zeroing: ["averages"],
};

function otherMethod() {
  return methodSelect.value !== "attention";
}

const GRADIENT_METHODS = new Set(CONFIG.gradient_methods);
// Gradients' scale follows the target's (1e-7 in a tiny random model, 1 in SmolLM2):
// three significant digits, not two decimals.
const GRADIENT_FORMAT = { valueName: "relevance", textFormat: "%{z:.3g}", hoverFormat: ".4g" };

function gradientMethod() {
  return GRADIENT_METHODS.has(methodSelect.value);
}

// The method the open view asks the API for.
function requestedMethod() {
  const views = METHOD_VIEWS[methodSelect.value];
  return views && !views.includes(state.view) ? "attention" : methodSelect.value;
}

// The target position chosen (#target-index), "" for the default; before the select is
// filled (the first response), the link's.
function chosenTarget() {
  return targetSelect.options.length ? targetSelect.value : (state.linked.target ?? "");
}

// The positions a gradient method's target can take (#target-index): the shown tokens
// when they are the outputs (not an encoder-decoder's encoder block), else only the default.
function fillTargets(res) {
  const outputs = res.family !== "encoder-decoder" || res.block !== "encoder";
  const tokens = outputs ? queryTokens(res) : [];
  const last = res.family === "encoder" ? "first" : "last";
  const labels = [`${last} token (default)`, ...tokens.map((t, i) => `${i}: ${displayToken(t)}`)];
  const values = ["", ...tokens.map((_, i) => String(i))];
  const key = labels.join("\n");
  if (targetSelect.dataset.key === key) return;
  const kept = state.linked.target ?? targetSelect.value;
  delete state.linked.target;
  targetSelect.replaceChildren(...values.map((value, i) => new Option(labels[i], value)));
  targetSelect.value = values.includes(kept) ? kept : "";
  targetSelect.dataset.key = key;
}

// What a gradient method explained (the response's `target`), for the figures' hints.
function targetText(res) {
  const t = res.target;
  if (!t) return "";
  const at = queryTokens(res)[t.index];
  const where = at === undefined ? `position ${t.index}` : `“${displayToken(at)}” (${t.index})`;
  const value = t.value.toPrecision(4);
  return t.kind === "logit"
    ? `Target: the logit of “${displayToken(t.token)}” as the next token after ${where}, ${value}.`
    : `Target: the output at ${where} along the sentence embedding, ${value}.`;
}

// What the maps hold, for hovers and colour bars.
function valueName() {
  return METHOD_VALUES[methodSelect.value] || "weight";
}

// The note under the controls, and the options that assume weights disabled.
function showMethod() {
  methodNote.hidden = !otherMethod();
  methodNote.textContent = METHOD_NOTES[methodSelect.value] || "";
  targetControl.hidden = !gradientMethod();
  const off = ablatedHeads().length > 0;
  for (const box of [hideSpecial, mergeWords]) {
    box.disabled = otherMethod() || off;
    box.title = otherMethod() ? "For the attention weights only (see Method)"
      : (off ? "Not with heads off (its positions count every token)" : "");
  }
  restoreHeads.hidden = !off;
}

// The chosen method's own map (head importance, gradient rollout, flow, value zeroing; for
// a per-head method, the open view) scrolled into sight when it is not wholly in it.
function revealMethod() {
  const name = { grad_rollout: "grad-rollout", value_zeroing: "value-zeroing" }[methodSelect.value]
    ?? methodSelect.value.replace("_", "-");
  const section = document.getElementById(`view-${state.view}`);
  const target = section.querySelector(`[data-map="${name}"]`) ||
    section.querySelector(".view-body");
  reveal(target);
}

// Scroll `element` into sight unless it is wholly in it (a tall one: its top).
function reveal(element) {
  if (!element) return;
  const box = element.getBoundingClientRect();
  if (box.top >= 0 && box.bottom <= window.innerHeight) return;
  element.scrollIntoView({ block: box.height > window.innerHeight ? "start" : "nearest" });
}

// ---------------------------------------------------------------------------
// Heads off (#ablate): "layer.head" pairs the API switches off (its `ablate`).

// The pairs typed in #ablate, [[layer, head], ...]; the malformed ones left out (and the
// field marked).
function ablatedHeads() {
  const pairs = [];
  let bad = false;
  for (const item of ablateInput.value.split(/[\s,;]+/)) {
    if (item === "") continue;
    const match = /^L?(\d{1,3})[.:/]H?(\d{1,3})$/i.exec(item);
    if (match) pairs.push([Number(match[1]), Number(match[2])]);
    else bad = true;
  }
  ablateInput.setAttribute("aria-invalid", String(bad));
  return pairs;
}

// The ablation's effect, from the response's `ablation`, in #ablation-note.
function showAblation(res) {
  const a = res && res.ablation;
  if (!a) {
    ablationNote.hidden = true;
    ablationNote.textContent = "";
    return;
  }
  const heads = a.heads.map(([l, h]) => `L${l}.H${h}`).join(", ");
  const tokens = displayTokens(a.tokens || queryTokens(res)); // an encoder-decoder's targets
  const worst = (values) => values.reduce((best, v, i) => (v > values[best] ? i : best), 0);
  let text = `Heads off: ${heads}. `;
  if (a.kl) {
    const changed = a.top_before.filter((row, i) => row[0].id !== a.top_after[i][0].id).length;
    const mean = a.kl.reduce((x, y) => x + y, 0) / a.kl.length;
    const i = worst(a.kl);
    text += `The most likely next token changes at ${changed} of ${a.kl.length} positions; ` +
      `the next-token distribution moves by ${mean.toFixed(4)} nats on average (KL), most ` +
      `after “${tokens[i]}” (${a.kl[i].toFixed(4)}: “${displayToken(a.top_before[i][0].token)}” ` +
      `${(100 * a.top_before[i][0].probability).toFixed(1)}% before, ` +
      `“${displayToken(a.top_after[i][0].token)}” ` +
      `${(100 * a.top_after[i][0].probability).toFixed(1)}% after).`;
    ablationNote.dataset.changed = String(changed);
  } else if (a.hidden_change) {
    const mean = a.hidden_change.reduce((x, y) => x + y, 0) / a.hidden_change.length;
    const i = worst(a.hidden_change);
    text += `The last hidden state moves by ${(100 * mean).toFixed(2)}% on average ` +
      `(‖h′ − h‖ / ‖h‖), most at “${tokens[i]}” (${(100 * a.hidden_change[i]).toFixed(2)}%).`;
  }
  ablationNote.textContent = text;
  ablationNote.hidden = false;
}

// The colour-scale choice (#colour-scale) for maps of `rows` queries: auto is per row for
// causal maps (a decoder's, or an encoder-decoder's decoder block: row 0's single weight
// 1.0 would otherwise wash out the rest) and above AUTO_ROW_LEN queries, per head below
// (heatmap.js colourBar says what each mode means).
function colourMode(rows) {
  return resolveScale(colourScale.value, rows, causalMaps() ? "row" : "head");
}

function causalMaps() {
  const request = state.request;
  if (!request) return false;
  const fam = family(modelInfo(request.model));
  return fam === "decoder" || (fam === "encoder-decoder" && request.block === "decoder");
}

const SCALE_NOTES = {
  shared: "coloured on one scale, the largest weight of all heads",
  head: "each scaled to its own maximum",
  row: "each query row scaled to its own maximum",
  log: "coloured on a log scale of the weight",
};

// The labels of a map pooled by `factor` ("the…mat"), or the tokens themselves.
function blockLabels(tokens, factor) {
  if (factor <= 1) return tokens;
  const blocks = [];
  for (let i = 0; i < tokens.length; i += factor) {
    const block = tokens.slice(i, i + factor);
    blocks.push(block.length === 1 ? block[0] : `${block[0]}…${block[block.length - 1]}`);
  }
  return blocks;
}

// Hover text of the thumbnails' rows (queries) or columns (keys): the tokens, or the
// tokens each pooled block covers ("tokens 0–3: [CLS]…sat").
function thumbnailHover(res, axis = "query") {
  const tokens = displayTokens(axis === "key" ? keyTokens(res) : queryTokens(res));
  const d = res.downsample;
  const f = d ? (axis === "key" ? (d.key_factor ?? d.factor) : d.factor) : 1;
  if (f === 1) return tokenHover(tokens);
  return tokenHover(blockLabels(tokens, f), f, tokens.length);
}

// ---------------------------------------------------------------------------
// The views.

async function showEnlarged(container, res, l, h) {
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

// The model view's hint and its grid's thumbnailGrid options (the cells read
// res.attentions when drawn; a stand-in of the grid reads none of them).
function modelGrid(res, body, enlarged) {
  const narrow = body.clientWidth < NARROW_GRID;
  const groups = kvGroups(res);
  const H = res.num_heads;
  // A phone's width shared by 12 heads gives 17 px slivers: the thumbnails keep
  // MIN_THUMB_PX and the grid scrolls sideways in its box instead (the page does not);
  // their rows then as tall as they are wide, not 70 px.
  const thumb = (body.clientWidth - GRID_FRAME_PX) / (H * 1.06); // 6% gaps
  const squeezed = thumb < SQUARE_THUMB_PX;
  const side = Math.max(MIN_THUMB_PX, thumb);
  body.closest(".view").style.setProperty("--grid-min-width",
    thumb < MIN_THUMB_PX ? `${Math.ceil(H * 1.06 * MIN_THUMB_PX + GRID_FRAME_PX)}px` : "0px");
  const scale = colourMode(queryTokens(res).length);
  let hint = `Rows are layers (L0–L${res.num_layers - 1}), columns heads ` +
    `(${narrow ? "" : "H"}0–${narrow ? "" : "H"}${H - 1}); the thumbnails are ` +
    `${SCALE_NOTES[scale]}. Click one to enlarge it below.`;
  if (groups) {
    hint += ` Grouped-query attention: the ${H} query heads share ${groups.kv} key/value ` +
      `heads, ${groups.per} each (heads 0–${groups.per - 1} read key/value head 0, and so ` +
      "on); dotted lines part the groups.";
  }
  const wideGroups = groups && body.clientWidth / groups.kv >= 150;
  const options = {
    rows: res.num_layers,
    cols: H,
    ...(squeezed ? { height: Math.round(60 + res.num_layers * side * 1.15) } : {}),
    cell: (l, h) => res.attentions[l][0][h],
    rowName: "L",
    colName: narrow ? "" : "H",
    title: "Layers × heads",
    scale,
    valueName: valueName(),
    hover: (l, h) => headName(res, l, h),
    queryHover: thumbnailHover(res, "query"),
    keyHover: thumbnailHover(res, "key"),
    colGroup: groups ? groups.per : 0,
    groupLabel: (g) => (wideGroups ? `key/value head ${g}` : `kv ${g}`),
    onClick: async (l, h) => {
      shadeBy(res, l, h); // the token strip's shading follows the enlarged head
      await showEnlarged(enlarged, res, l, h);
      reveal(enlarged); // below a tall grid (30 layers) it is out of sight: bring it up
    },
  };
  return { hint, options, kvHeads: groups ? groups.kv : H };
}

// The model view's watcher of a streamed overview (see overview): at the stream's start
// it lays out a stand-in of the grid (thumbnailPreview: the figure's size, blank
// thumbnails), then paints each layer's row as it comes, the rows of one animation frame
// together (a timer too: a background tab gets no frames). renderModelView then draws the
// figure under it. #view-model gets data-first-layer="true" once layer 0's row is painted.
function modelWatcher(section, ticket) {
  const body = section.querySelector(".view-body");
  const watcher = {
    stream: null, preview: null, box: null, queue: [], frame: null, timer: null,
    current: () => ticket === state.ticket && state.view === "model",
    start(stream) {
      if (!watcher.current()) return;
      watcher.stop();
      watcher.stream = stream;
      resultsPane.classList.remove("running"); // the new input's grid replaces the old
      // Its tokens replace the strip once the overview is whole: no grid under another
      // input's tokens meanwhile.
      const tokens = JSON.stringify([queryTokens(stream.res), keyTokens(stream.res)]);
      if (tokens !== state.selectionTokens) tokenBox.hidden = true;
      // What is known of the new input before its maps: the text above the grid.
      const known = { ...stream.res, shape: [stream.total, 1, stream.res.num_heads] };
      summary.textContent = describe(known);
      displayNote.textContent = noteFor(known);
      // The width is read before the old grid goes: the page does not shrink meanwhile.
      const { hint, options } = modelGrid(stream.res, body, null);
      clearPlots(body);
      addHint(body, hint);
      watcher.box = document.createElement("div");
      watcher.box.className = "grid-box";
      body.append(watcher.box);
      watcher.preview = thumbnailPreview(watcher.box, options);
    },
    layer(stream, l) {
      if (!watcher.current() || stream !== watcher.stream) return;
      watcher.queue.push(l);
      if (watcher.frame === null) {
        watcher.frame = requestAnimationFrame(watcher.flush);
        watcher.timer = setTimeout(watcher.flush, 100);
      }
    },
    flush() {
      const rows = watcher.queue;
      watcher.stop();
      if (!watcher.current() || !rows.length) return;
      for (const l of rows) watcher.preview.fillRow(l, watcher.stream.res.attentions[l][0]);
      if (section.dataset.firstLayer !== "true") {
        section.dataset.firstLayer = "true";
        state.firstLayerAt = performance.now();
      }
    },
    stop() {
      cancelAnimationFrame(watcher.frame);
      clearTimeout(watcher.timer);
      watcher.frame = null;
      watcher.queue = [];
    },
  };
  return watcher;
}

// Resolves once the page has been painted (a frame, then a task); after 100 ms at most, as
// a background tab gets no frames.
function nextFrame() {
  return new Promise((resolve) => {
    requestAnimationFrame(() => setTimeout(resolve, 0));
    setTimeout(resolve, 100);
  });
}

// BertViz's model view: N x H thumbnails in one figure; a click enlarges one. With
// grouped-query attention the heads sharing a key/value head are set apart. A streamed
// response's figure is drawn under its stand-in (`watcher`'s), which goes once it is drawn.
async function renderModelView(section, res, watcher = null) {
  const body = section.querySelector(".view-body");
  const enlarged = section.querySelector(".enlarged");
  const { hint, options, kvHeads } = modelGrid(res, body, enlarged);
  let container = body;
  let preview = null;
  if (watcher && watcher.preview && watcher.stream.final === res && watcher.box.isConnected) {
    // The rows still queued, and "Drawing the grid…", are shown before Plotly's draw, which
    // holds the page for a while (a fast stream's lines can all come before any frame).
    watcher.flush();
    await nextFrame();
    if (!watcher.current()) return;
    preview = watcher.preview;
    container = watcher.box;
    preview.cover();
  } else {
    clearPlots(body);
    addHint(body, hint);
  }
  const grid = tiledGrid(container, options);
  grid.id = "model-grid";
  grid.dataset.kvHeads = String(kvHeads);
  const gridDrawn = grid.drawn.then(() => {
    if (preview) preview.remove();
    if (watcher && !watcher.current()) return; // a newer input's stream owns the timings
    state.gridAt = performance.now();
    if (section.dataset.firstLayer !== "true") {
      section.dataset.firstLayer = "true";
      state.firstLayerAt = state.gridAt;
    }
  });
  // The enlarged head is fetched once the grid is drawn: its computation on the server
  // and its decoding here would otherwise share the CPU with the grid's drawing.
  await gridDrawn;
  await showImportance(importanceBox, res, enlarged);
  await showEnlarged(enlarged, res, 0, 0);
}

// Head importance (method head_importance): the layers × heads grid under the thumbnails,
// in their rows and columns; a click enlarges that head.
async function showImportance(container, res, enlarged) {
  clearPlots(container);
  if (!res.head_importance) return;
  const rows = res.head_importance.map((_, l) => `L${l}`);
  const cols = res.head_importance[0].map((_, h) => `H${h}`);
  addHint(container, `${targetText(res)} Each cell is |∂T/∂ξ| for that head's gate ` +
    "(Michel et al. 2019): how much the target would move if the head were switched off.");
  const figure = heatmapFigure({
    z: res.head_importance, rowLabels: rows, colLabels: cols, zmin: 0,
    title: "Head importance |∂T/∂ξ| (Michel et al. 2019)", yTitle: "Layer", xTitle: "Head",
    ...GRADIENT_FORMAT, valueName: "|∂T/∂ξ|",
  });
  // About 22 px a layer (30 for SmolLM2), the figure's own height.
  const height = Math.round(Math.max(330, 150 + rows.length * 22));
  figure.layout.height = height;
  const div = addPlot(container, figure, "plot importance-plot");
  div.style.height = `${height}px`;
  div.dataset.map = "head-importance";
  await div.drawn;
  div.on("plotly_click", (event) => {
    const point = event.points[0];
    showEnlarged(enlarged, res, Number(point.y), Number(point.x));
  });
}

// Compare: layer l's head mean (or one head, #compare-head) of the selected sentence (A)
// and of another (#compare-sentence, B, fetched alone with the same display options), and
// A − B when the two have as many tokens.
async function renderCompare(section, res, l) {
  const body = section.querySelector(".view-body");
  const texts = state.request.texts;
  if (compareSentence.options.length !== texts.length) {
    fillIndexSelect(compareSentence, texts.map((text, b) => `${b}: ${text.slice(0, 40)}`));
    if (texts.length > 1) compareSentence.value = "1";
  }
  const other = fillCompareModels(res);
  compareSentence.disabled = other !== null;
  // With another model, the heads both have.
  const heads = other ? Math.min(res.num_heads, other.num_heads) : res.num_heads;
  if (compareHead.options.length !== heads + 1) {
    fillHeadChoice(compareHead, heads, "mean of the heads");
  }
  const a = selectedIndex(sequenceSelect);
  let b = other ? a : selectedIndex(compareSentence);
  if (!other && b === a && texts.length > 1) { // B is another input than A
    b = (a + 1) % texts.length;
    compareSentence.value = String(b);
  }
  if (!other && texts.length < 2) {
    // One input and no other model: A would be compared with itself (A − B all 0).
    clearPlots(body);
    const ask = paragraph(body, "hint compare-note compare-ask", "Compare needs a second " +
      `input: add a second line to the ${textsLabel.textContent} box and press Compute, or ` +
      "choose another model of the same kind under “against”.");
    const button = document.createElement("button");
    button.type = "button";
    button.className = "secondary";
    button.textContent = "Add a second line";
    button.addEventListener("click", () => {
      if (!textsBox.value.endsWith("\n")) textsBox.value += "\n";
      textsBox.focus();
      textsBox.setSelectionRange(textsBox.value.length, textsBox.value.length);
      updateStale();
    });
    ask.append(" ", button);
    return;
  }
  // Another model's layer l, or its last layer when it has fewer.
  const lB = other ? Math.min(l, other.num_layers - 1) : l;
  const mapsA = await layerMaps(res, l);
  const answerB = await requestAttention(viewRequest({
    // Another model has its own heads: the heads switched off are this model's.
    sequence_index: b, layer_index: lB, ...(other ? { model: other.name, ablate: undefined } : {}),
  }));
  if (mapsA === null || answerB === null) return;
  const pick = (maps, headMean) => (
    compareHead.value === "mean" ? headMean : maps[Number(compareHead.value)]);
  const zA = pick(mapsA.attentions, mapsA.headMean);
  const zB = pick(answerB.attentions[0][0], answerB.head_mean[0][0]);
  const what = compareHead.value === "mean" ? "mean of the heads" : `head ${compareHead.value}`;
  const nameA = other ? res.model : `sentence ${a}`;
  const nameB = other ? other.name : `sentence ${b}`;
  clearPlots(body);
  const plots = [
    addPlot(body, weightFigure(zA, queryTokens(res), keyTokens(res),
      `A: ${nameA}, layer ${l}, ${what}`), "head-plot"),
    addPlot(body, weightFigure(zB, queryTokens(answerB), keyTokens(answerB),
      `B: ${nameB}, layer ${lB}, ${what}`), "head-plot"),
  ];
  const same = JSON.stringify([queryTokens(res), keyTokens(res)]) ===
    JSON.stringify([queryTokens(answerB), keyTokens(answerB)]);
  if (zA.length === zB.length && zA[0].length === zB[0].length && (same || !other)) {
    const diff = zA.map((row, i) => row.map((v, j) => v - zB[i][j]));
    const positions = (n) => Array.from({ length: n }, (_, i) => String(i));
    const div = addPlot(body, heatmapFigure({
      z: diff,
      rowLabels: same ? displayTokens(queryTokens(res)) : positions(diff.length),
      colLabels: same ? displayTokens(keyTokens(res)) : positions(diff[0].length),
      signed: true, valueName: "A − B", colorTitle: `${valueName()} A − B`, title: "A − B",
      yTitle: same ? "Query" : "Query position", xTitle: same ? "Key" : "Key position",
    }), "head-plot");
    div.dataset.map = "difference";
    plots.push(div);
  } else if (other) {
    paragraph(body, "hint compare-note", `No difference map: ${res.model} and ${other.name} ` +
      `split this sentence into different tokens (${zA.length} and ${zB.length}).`);
  } else {
    paragraph(body, "hint compare-note", `No difference map: sentence ${a} has ` +
      `${zA.length} tokens and sentence ${b} ${zB.length}; positions would not match.`);
  }
  if (other && lB !== l) {
    paragraph(body, "hint compare-note", `${other.name} has ${other.num_layers} layers: ` +
      `B is its last.`);
  }
  await Promise.all(plots.map((div) => div.drawn));
}

// #compare-model: "this model" and every other loaded model of the same family (their
// requests take the same fields); returns the chosen other model's listing, or null.
function fillCompareModels(res) {
  const others = state.models.filter((m) => (
    m.name !== res.model && m.family === res.family && m.state === "ready"
    && !mediaModality(m)));
  const previous = compareModel.value;
  compareModel.replaceChildren(option("", "this model, another sentence"),
    ...others.map((m) => option(m.name, `${m.name}, the same sentence`)));
  compareModel.value = others.some((m) => m.name === previous) ? previous : "";
  return modelInfo(compareModel.value);
}

// The line view of layer l (tokenviews.js lineView) at full resolution; the heads shown
// are kept across redraws.
const lineHeads = { count: 0, visible: new Set() };

async function renderLineView(section, res, l) {
  const body = section.querySelector(".view-body");
  const maps = await layerMaps(res, l);
  if (maps === null) return;
  if (lineHeads.count !== res.num_heads) {
    lineHeads.count = res.num_heads;
    lineHeads.visible = new Set(Array.from({ length: res.num_heads }, (_, h) => h));
  }
  lineView(body, {
    queries: displayTokens(queryTokens(res)),
    keys: displayTokens(keyTokens(res)),
    maps: maps.attentions,
    selected: state.selected,
    visible: lineHeads.visible,
    onSelect: async (q, add) => {
      await selectToken(q, add);
      renderView();
    },
  });
}

// The neuron view of one head (#neuron-head) of layer l, for the first selected query
// (else 0): the API's `neuron` (every token counted, special ones included).
async function renderNeuronView(section, res, l) {
  const body = section.querySelector(".view-body");
  if (neuronHead.options.length !== res.num_heads) {
    fillIndexSelect(neuronHead, Array.from({ length: res.num_heads }, (_, h) => `Head ${h}`));
  }
  const h = selectedIndex(neuronHead);
  const plain = !hideSpecial.checked && !mergeWords.checked;
  const chosen = plain ? [...state.selected] : [];
  // Nothing selected: a decoder's last token (its row predicts what comes next), else 0.
  const last = plain && causalMaps() ? queryTokens(res).length - 1 : 0;
  const q = chosen.length ? Math.min(...chosen) : last;
  const answer = await requestAttention(viewRequest({
    hide_special_tokens: false, merge_words: false, layer_index: l, head_index: h,
    query_index: q, neuron: true, display_size: 8, method: "attention",
  }));
  if (answer === null) return;
  const step = answer.neuron;
  const tokens = displayTokens(queryTokens(answer));
  body.replaceChildren();
  const strip = document.createElement("div");
  strip.className = "strip-box";
  body.append(strip);
  tokenStrip(strip, tokens, {
    selected: new Set([q]), label: "Query token",
    onSelect: async (p) => {
      if (hideSpecial.checked || mergeWords.checked) return; // other positions there
      await selectToken(p, false);
      renderView();
    },
  });
  const box = document.createElement("div");
  body.append(box);
  const kv = answer.num_key_value_heads < answer.num_heads
    ? `, key/value head ${step.key_value_head} (grouped-query attention)` : "";
  neuronView(box, {
    title: `Layer ${l}, head ${h}${kv}, query ${q} (${tokens[q]}): d_k = ${step.d_k}, ` +
      `scaling ${step.scaling.toPrecision(4)} (1/√${step.d_k} = ` +
      `${(1 / Math.sqrt(step.d_k)).toPrecision(4)}).`,
    queryLabel: tokens[q],
    keyLabels: displayTokens(keyTokens(answer)),
    query: step.query,
    keys: step.keys,
    scaling: step.scaling,
    masked: step.masked,
    weights: step.weights,
  });
  box.dataset.query = String(q);
  box.dataset.head = String(h);
}

// Every head of one layer at once, compact (CircuitsVis's attention_patterns): one figure of
// small maps on one colour scale, a row per key/value head with grouped-query attention
// (its query heads side by side), else rows of up to 6 heads (3 on a phone); a click
// enlarges a head below with its tokens (the selection is outlined there).
const LAYER_COLUMNS = 6;
const LAYER_CELL_PX = { min: 70, max: 170 }; // a map's side in the compact grid

async function renderLayerView(section, res, l) {
  const ticket = state.ticket;
  const body = section.querySelector(".view-body");
  const enlarged = section.querySelector(".enlarged");
  const maps = await layerMaps(res, l);
  if (maps === null || ticket !== state.ticket) return;
  clearPlots(body);
  const H = res.num_heads;
  const narrow = body.clientWidth < NARROW_GRID;
  const groups = kvGroups(res);
  const byGroup = Boolean(groups) && groups.per <= (narrow ? 4 : 9);
  const cols = byGroup ? groups.per
    : Math.ceil(H / Math.ceil(H / (narrow ? LAYER_COLUMNS / 2 : LAYER_COLUMNS)));
  const rows = Math.ceil(H / cols);
  const head = (r, c) => r * cols + c;
  const scale = colourMode(queryTokens(res).length);
  // Square maps: the width left beside the titles and the colour bar, shared by the columns.
  const side = Math.max(LAYER_CELL_PX.min,
    Math.min(LAYER_CELL_PX.max, (body.clientWidth - 150) / (cols * 1.06)));
  addHint(body, `All ${H} heads of layer ${l}, ${SCALE_NOTES[scale]} (one colour bar). ` +
    "Hover a map for its weights; click one to enlarge it below with its tokens." +
    (byGroup ? ` Grouped-query attention: a row per key/value head, its ${groups.per} ` +
      "query heads side by side." : ""));
  const grid = thumbnailGrid(body, {
    rows, cols, count: H,
    cell: (r, c) => maps.attentions[head(r, c)],
    rowName: byGroup ? "kv " : "",
    colName: "",
    cellTitle: (r, c) => `H${head(r, c)}`,
    title: `Layer ${l}: ${H} heads`,
    scale,
    valueName: valueName(),
    height: Math.round(70 + rows * side * 1.3),
    hover: (r, c) => headName(res, l, head(r, c)),
    queryHover: tokenHover(displayTokens(queryTokens(res))),
    keyHover: tokenHover(displayTokens(keyTokens(res))),
    onClick: async (r, c) => {
      state.layerHead = head(r, c);
      shadeBy(res, l, state.layerHead);
      await showEnlarged(enlarged, res, l, state.layerHead);
      reveal(enlarged);
    },
  });
  grid.id = "layer-grid";
  await grid.drawn;
  if (ticket !== state.ticket) return; // another layer or view was asked for meanwhile
  state.shownAt = performance.now();
  await showEnlarged(enlarged, res, l, state.layerHead < H ? state.layerHead : 0);
}

// The head average of each layer, one layer's head average, the mean over all layers
// and heads, and attention rollout (Abnar & Zuidema 2020).
async function renderAverages(section, res, l) {
  const body = section.querySelector(".view-body");
  const maps = await layerMaps(res, l);
  if (maps === null) return;
  clearPlots(body);
  addHint(body, "The head average of each layer, each scaled to its own maximum. Click " +
    "one to show it below.");
  // Up to STRIP_COLUMNS layers a row: 30 layers in one row would be slivers.
  const N = res.num_layers;
  const stripRows = Math.ceil(N / STRIP_COLUMNS);
  const stripCols = Math.ceil(N / stripRows);
  const layerAt = (r, c) => r * stripCols + c;
  const strip = thumbnailGrid(body, {
    rows: stripRows,
    cols: stripCols,
    count: N,
    cell: (r, c) => res.head_mean[layerAt(r, c)][0],
    rowName: "",
    colName: "L",
    cellTitle: (r, c) => `L${layerAt(r, c)}`,
    title: "Head average of each layer",
    valueName: valueName(),
    zmax: "each",
    scale: colourMode(queryTokens(res).length),
    hover: (r, c) => `layer ${layerAt(r, c)}, mean of ${res.num_heads} heads`,
    queryHover: thumbnailHover(res, "query"),
    keyHover: thumbnailHover(res, "key"),
    onClick: (r, c) => {
      layerSelect.value = String(layerAt(r, c));
      renderView();
    },
  });
  strip.id = "layer-strip";
  const grid = document.createElement("div");
  grid.className = "heads";
  body.append(grid);
  const ad = res.average_downsample;
  const averageRows = blockLabels(queryTokens(res), ad ? ad.factor : 1);
  const averageCols = blockLabels(keyTokens(res), ad ? ad.key_factor : 1);
  const figures = [
    ["head-mean", maps.headMean, queryTokens(res), keyTokens(res), `Head average, layer ${l}`],
    ["layer-mean", res.layer_mean[0], averageRows, averageCols,
      `Average of all ${res.num_layers} layers and heads`],
  ];
  if (res.rollout) {
    figures.push(["rollout", res.rollout[0], averageRows, averageCols,
      "Attention rollout (Abnar & Zuidema 2020)"]);
  }
  const sink = attentionSink(res);
  if (sink) {
    showSinkNote(body, grid, sink);
    if (state.excludeSink) {
      for (const figure of figures) {
        if (!["head-mean", "layer-mean", "rollout"].includes(figure[0])) continue;
        figure[1] = withoutFirstToken(figure[1]);
        figure[4] += ", first token left out";
      }
    }
  }
  if (res.method_map && res.method === "flow") {
    figures.push(["flow", res.method_map[0], queryTokens(res), keyTokens(res),
      "Attention flow (Abnar & Zuidema 2020)"]);
  }
  if (res.method_map && res.method === "value_zeroing" && res.method_map[l]) {
    figures.splice(1, 0, ["value-zeroing", res.method_map[l], queryTokens(res), keyTokens(res),
      `Value zeroing, layer ${l} (Mohebbi et al. 2023)`]);
  }
  if (res.method_map && res.method === "grad_rollout") {
    // R − I: the identity (each token's own residual) would outshine what attention adds.
    const relevance = res.method_map[0].map((row, i) => row.map((v, j) => (i === j ? v - 1 : v)));
    figures.push(["grad-rollout", relevance, averageRows, averageCols,
      "Gradient-weighted rollout R − I (Chefer et al. 2021)"]);
  }
  // The chosen method's map first: next to the picker, not under the others.
  const own = figures.findIndex(([name]) => ["flow", "value-zeroing", "grad-rollout"].includes(name));
  if (own > 0) figures.unshift(...figures.splice(own, 1));
  const plots = [strip.drawn];
  for (const [name, z, rows, cols, title] of figures) {
    const extra = name === "grad-rollout" ? GRADIENT_FORMAT
      : (name === "value-zeroing" ? { valueName: "context mixing" } : {});
    const div = addPlot(grid, weightFigure(z, rows, cols, title, true, extra), "head-plot");
    div.dataset.map = name;
    if (name === "head-mean") div.drawn.then(() => bindSelection(div));
    plots.push(div.drawn);
  }
  if (res.target) paragraph(body, "hint target-note", targetText(res));
  if (res.rollout) {
    paragraph(body, "hint", "Rollout: per layer, Â = 0.5 · (head average) + 0.5 · I for " +
      "the residual connection, then Â_N ⋯ Â_1, computed with every token: row i is how " +
      "much of token i's last-layer representation flows from each input token; its rows " +
      "sum to 1.");
  } else if (res.method === "norm") {
    paragraph(body, "hint", "Attention rollout multiplies attention weights through the " +
      "layers: switch Method back to the attention weights to see it.");
  } else {
    paragraph(body, "hint", "Attention rollout needs square maps through the layers: " +
      "cross-attention has none (open the encoder or decoder block for it).");
  }
  await Promise.all(plots);
}

// An attention sink (Xiao et al. 2023, "Efficient Streaming Language Models with Attention
// Sinks"): the share of the weight on the first token, the mean over queries 1.. of
// A[i, 0] / sum_j A[i, j] (row 0 has only itself in a causal map), in the average of all
// layers and heads and in rollout. {mean, rollout, token} when either is at least
// SINK_SHARE; null without one, with another method, or with pooled averages (their
// first column is a block of tokens).
const SINK_SHARE = 0.5;

function firstTokenShare(z) {
  let total = 0;
  for (let i = 1; i < z.length; i += 1) {
    const sum = z[i].reduce((acc, v) => acc + (v ?? 0), 0);
    total += sum > 0 ? (z[i][0] ?? 0) / sum : 0;
  }
  return z.length > 1 ? total / (z.length - 1) : 0;
}

function attentionSink(res) {
  const ad = res.average_downsample;
  if ((res.method && res.method !== "attention") || (ad && (ad.factor > 1 || ad.key_factor > 1))
    || !res.layer_mean || queryTokens(res).length < 3) return null;
  const mean = firstTokenShare(res.layer_mean[0]);
  const rollout = res.rollout ? firstTokenShare(res.rollout[0]) : null;
  if (mean < SINK_SHARE && (rollout ?? 0) < SINK_SHARE) return null;
  return { mean, rollout, token: keyTokens(res)[0] };
}

// `z` with its first row and column left out (null: drawn gray, as masked cells), each
// other row divided by its new sum (weights). The shape stays: a click on row i and the
// selection's outlines still mean token i.
function withoutFirstToken(z) {
  return z.map((row, i) => {
    if (i === 0) return row.map(() => null);
    const sum = row.reduce((acc, v, j) => acc + (j === 0 ? 0 : (v ?? 0)), 0);
    return row.map((v, j) => (j === 0 || v === null ? null : (sum > 0 ? v / sum : 0)));
  });
}

// The sink's note above the averages, with the choice to leave the first token out.
function showSinkNote(body, before, sink) {
  const note = document.createElement("div");
  note.className = "sink-note";
  note.setAttribute("role", "note");
  const pct = (v) => `${(100 * v).toFixed(0)}%`;
  const where = sink.rollout === null ? "" : `, and ${pct(sink.rollout)} of rollout's`;
  paragraph(note, "", `Attention sink: on average ${pct(sink.mean)} of each row's weight ` +
    `(all layers and heads)${where} lands on the first token, “${displayToken(sink.token)}”. ` +
    "Models park attention there when a head has nothing to attend to (Xiao et al. 2023), " +
    "so rollout mostly says that everything flows from it. Norm-based attention (Method) " +
    "weighs each token by what its value vector carries, and the gradient methods by what " +
    "the prediction depends on; or leave the first token out here.");
  const label = document.createElement("label");
  label.className = "inline";
  const box = document.createElement("input");
  box.type = "checkbox";
  box.id = "exclude-sink";
  box.checked = Boolean(state.excludeSink);
  box.addEventListener("change", () => {
    state.excludeSink = box.checked;
    renderView();
  });
  label.append(box, " leave the first token out of the averages and rollout (rows renormalised)");
  note.append(label);
  note.dataset.share = sink.mean.toFixed(4);
  if (sink.rollout !== null) note.dataset.rolloutShare = sink.rollout.toFixed(4);
  body.insertBefore(note, before);
}

// ---------------------------------------------------------------------------
// The head atlas (atlas.js): the chosen model's heads scored over the shipped corpus, or
// over the form's texts; a click on a head opens it in the layer view on the input.

const atlasOwn = document.getElementById("atlas-own");

async function renderAtlas(section, ticket) {
  const body = section.querySelector(".view-body");
  const request = {
    model: state.request.model,
    device: state.request.device,
    ...(atlasOwn.checked ? { texts: state.request.texts } : {}),
  };
  const key = JSON.stringify(request);
  const where = atlasOwn.checked ? "the form's texts" : "the shipped corpus";
  summary.textContent = `Head atlas of ${request.model}, scored on ${where}.`;
  displayNote.textContent = "";
  // One computation per atlas: a second view of it (the tab again) waits for the first;
  // another atlas asked for meanwhile (another model, the own-texts box) stops the first.
  if (state.atlasFetch && state.atlasFetch.key !== key) {
    state.atlasFetch.controller.abort();
    state.atlasFetch = null;
  }
  let atlas = state.atlases.get(key);
  if (!atlas) {
    const box = section.querySelector(".atlas-progress");
    const parts = {
      label: box.querySelector(".atlas-progress-label"),
      bar: box.querySelector(".layer-progress-bar"),
      fill: box.querySelector(".layer-progress-fill"),
    };
    const current = () => ticket === state.ticket;
    drawProgress(parts, "Scoring the heads… (the first atlas of a model takes up to a minute)",
      null, null);
    box.hidden = false;
    if (!state.atlasFetch) {
      const controller = new AbortController();
      const job = { key, controller, progress: null, promise: null };
      job.promise = fetchAtlas(request, (done, total) => {
        if (job.progress) job.progress(done, total);
      }, controller.signal).finally(() => {
        if (state.atlasFetch === job) state.atlasFetch = null;
      });
      state.atlasFetch = job;
    }
    // Only the drawing that waits now moves the bar (an older one's ticket is past).
    state.atlasFetch.progress = (done, total) => {
      if (current()) drawProgress(parts, `Scoring the heads: pass ${done} of ${total}…`, done, total);
    };
    try {
      atlas = await state.atlasFetch.promise;
    } catch (error) {
      if (current() && error.name !== "AbortError") {
        clearPlots(body);
        showError(error.message);
      }
      return false;
    } finally {
      if (current()) box.hidden = true;
    }
    state.atlases.set(key, atlas);
  }
  if (ticket !== state.ticket) return false;
  clearError();
  state.atlas = atlas;
  state.atlasRequest = request;
  window.attnvizModels.lastAtlas = atlas;
  section.dataset.cached = String(atlas.cached);
  await drawAtlas(body, atlas, openHead);
  return true;
}

// Head h of layer l in the layer view, on the form's input, enlarged and in sight. An
// encoder-decoder's atlas scores its encoder: that block is opened first.
async function openHead(l, h) {
  state.layerHead = h;
  state.view = "layer";
  const block = state.atlas && state.atlas.block;
  if (state.request.block && block && state.request.block !== block) {
    blockSelect.value = block;
    await compute();
  }
  layerSelect.value = String(l);
  writeUrlState(state.request, state.view);
  if (await renderView()) reveal(document.querySelector("#view-layer .enlarged"));
}

atlasOwn.addEventListener("change", () => {
  if (state.view === "atlas") renderView();
});
document.getElementById("atlas-csv").addEventListener("click", () => {
  if (state.atlas) saveAtlas(state.atlas, "csv");
});
document.getElementById("atlas-json").addEventListener("click", () => {
  if (state.atlas) saveAtlas(state.atlas, "json");
});

// ---------------------------------------------------------------------------
// The token explorer (Generation for decoders): the tokens as buttons; a click asks
// for that query's row in every layer and head (query_index) and, for decoders, the
// next-token candidates at every position (top_k).

// The request of query position q: the overview's input with every token shown
// (query_index counts them all), one pooled head only (the maps are not drawn here).
function queryRequest(q) {
  const decoder = family(modelInfo(state.request.model)) === "decoder";
  return viewRequest({
    hide_special_tokens: false, merge_words: false, query_index: q, layer_index: 0, head_index: 0,
    display_size: 8, top_k: decoder ? TOP_K : 0,
  });
}

async function queryResponse(q) {
  const body = queryRequest(q);
  const key = JSON.stringify(body);
  if (!state.queries.has(key)) {
    const res = await requestAttention(body);
    if (res === null) return null;
    state.queries.set(key, res);
    rememberSpecials(res);
  }
  window.attnvizModels.lastQuery = state.queries.get(key);
  return state.queries.get(key);
}

// The position explored first: the prompt's last token (its row chose the first
// generated token), else the first token that is not special.
// A decoder without generation: its last token (the one whose row predicts what comes next).
function defaultQuery(res) {
  if (res.generation) return res.generation.prompt_length - 1;
  if (res.family === "decoder") return res.tokens[0].length - 1;
  const mask = res.special_tokens_mask[0];
  const first = mask.findIndex((special) => !special);
  return first < 0 ? 0 : first;
}

function chipText(token) {
  const fragment = document.createDocumentFragment();
  const shown = displayToken(token);
  const match = /^([␣↵⇥]+)(.*)$/su.exec(shown);
  if (match && match[2]) {
    const lead = document.createElement("span");
    lead.className = "chip-space";
    lead.textContent = match[1];
    fragment.append(lead, match[2]);
  } else {
    fragment.append(shown);
  }
  return fragment;
}

function drawChips(section, res, selected) {
  const chips = section.querySelector(".token-chips");
  const tokens = queryTokens(res);
  const promptLength = res.generation ? res.generation.prompt_length : tokens.length;
  const mask = res.special_tokens_mask[0];
  const buttons = tokens.map((token, i) => {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "chip";
    if (i >= promptLength) button.classList.add("generated");
    if (mask[i]) button.classList.add("special");
    button.dataset.index = String(i);
    button.setAttribute("aria-pressed", String(i === selected));
    const role = i >= promptLength ? "generated" : (res.generation ? "prompt" : "input");
    button.title = `token ${i} (${role}${mask[i] ? ", special" : ""}): ${token}`;
    button.append(chipText(token));
    button.addEventListener("click", () => selectQuery(i));
    return button;
  });
  chips.replaceChildren(...buttons);
  chips.dataset.count = String(tokens.length);
  chips.dataset.promptLength = String(promptLength);
}

function markChip(section, q) {
  for (const chip of section.querySelectorAll(".token-chips .chip")) {
    chip.setAttribute("aria-pressed", String(Number(chip.dataset.index) === q));
  }
}

// The rows of query q in every layer and head: (N * H) rows over the keys it may see.
function rowsFigure(res, q) {
  const N = res.query_attentions.length;
  const H = res.num_heads;
  const causal = res.family === "decoder" || res.block === "decoder";
  const keys = keyTokens(res);
  const width = causal ? q + 1 : keys.length;
  const z = [];
  const rowLabels = [];
  const rowHover = [];
  for (let l = 0; l < N; l += 1) {
    for (let h = 0; h < H; h += 1) {
      z.push(res.query_attentions[l][h].slice(0, width));
      rowLabels.push(`L${l} H${h}`);
      rowHover.push(headName(res, l, h));
    }
  }
  const colLabels = displayTokens(keys.slice(0, width));
  const token = displayToken(queryTokens(res)[q]);
  const figure = heatmapFigure({
    z, rowLabels, colLabels, rowHover, colHover: tokenHover(colLabels),
    title: `Row of token ${q} “${token}” in every layer and head`,
    yTitle: "Layer, head", xTitle: causal ? "Key (earlier tokens)" : "Key", zmin: 0,
    valueName: valueName(),
  });
  // A faint line between layers.
  figure.layout.shapes = Array.from({ length: N - 1 }, (_, l) => ({
    type: "line", xref: "paper", x0: 0, x1: 1, y0: (l + 1) * H - 0.5, y1: (l + 1) * H - 0.5,
    line: { color: "rgba(128, 128, 128, 0.35)", width: 0.5 },
  }));
  figure.layout.margin = { ...figure.layout.margin, l: 72 };
  return { figure, rows: N * H, cols: width };
}

function nextTokensTable(container, res, q) {
  container.replaceChildren();
  const candidates = res.next_tokens && res.next_tokens[q];
  container.parentElement.classList.toggle("no-next", !candidates);
  if (!candidates) return;
  const tokens = queryTokens(res);
  const following = q + 1 < tokens.length ? res.input_ids[0][q + 1] : null;
  const generated = res.generation && q + 1 >= res.generation.prompt_length;
  const heading = document.createElement("h2");
  heading.textContent = `Next token after “${displayToken(tokens[q])}”`;
  const table = document.createElement("table");
  table.className = "data-table next-table";
  const head = table.createTHead().insertRow();
  for (const text of ["#", "token", "probability"]) {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = text;
    head.append(th);
  }
  const tbody = table.createTBody();
  candidates.forEach((c, rank) => {
    const row = tbody.insertRow();
    if (c.id === following) row.className = "current";
    row.insertCell().textContent = String(rank + 1);
    const tokenCell = row.insertCell();
    tokenCell.className = "token-cell";
    tokenCell.textContent = displayToken(c.token);
    tokenCell.title = `id ${c.id}`;
    const cell = row.insertCell();
    cell.className = "prob-cell";
    const bar = document.createElement("span");
    bar.className = "prob-bar";
    bar.style.width = `${Math.max(1, Math.round(100 * c.probability))}%`;
    const value = document.createElement("span");
    value.className = "prob-value";
    value.textContent = `${(100 * c.probability).toFixed(1)}%`;
    cell.append(bar, value);
  });
  let note;
  if (following === null) {
    note = "What the model would write after the last token.";
  } else if (!candidates.some((c) => c.id === following)) {
    note = `The token that followed, “${displayToken(tokens[q + 1])}”, is not among the top ${TOP_K}.`;
  } else {
    note = generated
      ? "Highlighted: the token that was generated next."
      : "Highlighted: the token that follows in the prompt.";
  }
  container.append(heading, table);
  paragraph(container, "hint", note);
}

async function drawQuery(section, res, q) {
  const rowsBox = section.querySelector(".query-rows");
  const { figure, rows, cols } = rowsFigure(res, q);
  // About 3.6 px a row (270 rows for SmolLM2), the figure's own height.
  const height = Math.round(Math.max(360, Math.min(1150, rows * 3.6 + 150)));
  figure.layout.height = height;
  clearPlots(rowsBox);
  const div = addPlot(rowsBox, figure, "plot rows-plot");
  div.style.height = `${height}px`;
  div.id = "query-rows";
  div.dataset.query = String(q);
  div.dataset.rows = String(rows);
  div.dataset.cols = String(cols);
  nextTokensTable(section.querySelector(".next-tokens"), res, q);
  const drawn = [div.drawn];
  if (res.method === "grad_rollout" && res.method_map) {
    // The token's row of gradient-weighted rollout, its own residual (the identity) left out.
    const row = res.method_map[0][q].slice(0, cols).map((v, j) => (j === q ? v - 1 : v));
    addHint(rowsBox, `${targetText(res)} Below: token ${q}'s row of gradient-weighted ` +
      "rollout (Chefer et al. 2021), R − I: how much each key token matters to the target " +
      "through this token.");
    const strip = heatmapFigure({
      z: [row], rowLabels: [displayToken(queryTokens(res)[q])],
      colLabels: displayTokens(keyTokens(res).slice(0, cols)),
      title: `Gradient-weighted rollout, row of token ${q} (R − I)`, zmin: 0,
      xTitle: "Key", yTitle: "Query", ...GRADIENT_FORMAT,
    });
    strip.layout.height = 240;
    const plot = addPlot(rowsBox, strip, "plot rollout-row");
    plot.dataset.map = "grad-rollout-row";
    drawn.push(plot.drawn);
  }
  await Promise.all(drawn);
}

// The token explorer of the selected input, with query q (default: defaultQuery).
async function renderGeneration(section, ticket) {
  const queryTicket = state.queryTicket; // a token chosen meanwhile draws instead
  const current = () => ticket === state.ticket && queryTicket === state.queryTicket;
  let q = state.queryIndex;
  // Without a chosen position, first the overview (which knows the prompt's length).
  if (q === null) {
    const res = await overview();
    if (res === null || !current()) return false;
    const full = res.hidden_special_tokens ? null : res;
    q = full ? defaultQuery(full) : null;
    // A link's token, where the input has it.
    const linked = Number(state.linked.query);
    delete state.linked.query;
    if (full && Number.isInteger(linked) && linked < queryTokens(full).length) q = linked;
    if (q === null) {
      // The overview hid the special tokens: positions differ; ask for the last one's row.
      q = res.generation ? res.generation.prompt_length - 1 : 0;
    }
    state.queryIndex = q;
  }
  const res = await queryResponse(q);
  if (res === null || !current()) return false;
  fillTargets(res);
  summary.textContent = describeQuery(res, q);
  displayNote.textContent = noteForQuery(res);
  const decoder = res.family === "decoder";
  const intro = section.querySelector(".generation-intro");
  const tokens = queryTokens(res);
  if (res.generation) {
    const g = res.generation;
    intro.textContent = `The prompt (${g.prompt_length} tokens${state.request.chat ? ", in the chat template" : ""}) ` +
      `and the ${g.tokens.length} generated tokens (highlighted); special tokens are grey. ` +
      "Choose a token to see its row in every layer and head: what it attended to, and " +
      `the model's top ${TOP_K} candidates for the token after it.`;
  } else if (res.block === "cross") {
    intro.textContent = `The decoder's ${tokens.length} target tokens (the queries of ` +
      "cross-attention); special tokens are grey. Choose one to see its row in every layer " +
      "and head: which of the text's tokens it attended to.";
  } else {
    intro.textContent = `The ${tokens.length} tokens; special tokens are grey. Choose one to ` +
      "see its row in every layer and head: what it attended to." +
      (decoder ? ` With the model's top ${TOP_K} candidates for the token after it.` : "");
  }
  section.querySelector(".causal-note").hidden = !decoder;
  drawChips(section, res, q);
  await drawQuery(section, res, q);
  section.querySelector(".token-chips").dataset.query = String(q);
  return true;
}

// A chip was chosen: only the detail is drawn again (the chips, and the focus, stay).
async function selectQuery(q) {
  const section = document.getElementById("view-generation");
  const ticket = (state.queryTicket += 1);
  state.queryIndex = q;
  markChip(section, q);
  section.dataset.drawn = "false";
  const res = await busy(() => queryResponse(q), "Computing this token's rows…");
  if (res === null || ticket !== state.queryTicket || state.view !== "generation") return;
  writeLinkSettings(state.view); // the token picked travels in the link
  summary.textContent = describeQuery(res, q);
  await drawQuery(section, res, q);
  section.querySelector(".token-chips").dataset.query = String(q);
  if (ticket === state.queryTicket) section.dataset.drawn = "true";
}

// ---------------------------------------------------------------------------
// Token selection (tokens.js) in the model, layer and averages views. Positions count
// the shown tokens (after "hide special tokens"); pooled maps outline the block.

function isSelfAttention(res) {
  return !res.key_tokens;
}

// The selection's outlines on every map of the open view's section.
function outlineView(section, res) {
  const self = isSelfAttention(res);
  const rows = queryTokens(res).length;
  const cols = keyTokens(res).length;
  const full = selectionShapes(state.selected, { rows, cols }, self);
  const done = [];
  for (const div of section.querySelectorAll(".head-plot, .enlarged-plot")) {
    if (!div.layout) continue;
    const map = div.dataset.map;
    const ad = res.average_downsample;
    if ((map === "layer-mean" || map === "rollout") && ad) {
      const box = { rows: div.data[0].z.length, cols: div.data[0].z[0].length };
      done.push(outline(div, selectionShapes(state.selected, box, self,
        ad.factor, ad.key_factor ?? ad.factor)));
    } else {
      done.push(outline(div, full));
    }
  }
  const grid = section.querySelector("#model-grid");
  if (grid && grid.tiles && grid.layout) {
    const { tiles } = grid;
    const d = res.downsample;
    const fq = d ? d.factor : 1;
    const fk = d ? (d.key_factor ?? d.factor) : 1;
    const shapes = [];
    for (let r = 0; r < tiles.rows; r += 1) {
      for (let c = 0; c < tiles.cols; c += 1) {
        // Rows only: columns too would clutter hundreds of thumbnails (the enlarged map
        // has both).
        shapes.push(...selectionShapes(state.selected, {
          x: tiles.x[c], y: tiles.y[r], rows: tiles.height, cols: tiles.width,
        }, false, fq, fk));
      }
    }
    done.push(outline(grid, shapes));
  }
  return Promise.all(done);
}

// The weight each shown key token gets from the selection in layer l (null: nothing
// selected): from the head mean or the head #shade-head names. A pooled overview (long
// inputs) gives each token its block's pooled weight, with no second request.
function selectionWeights(res, l) {
  if (!state.selected.size) return null;
  const d = res.downsample;
  const fq = d ? d.factor : 1;
  const fk = d ? (d.key_factor ?? d.factor) : 1;
  const blocks = shadedWeights(res.attentions[l][0], state.selected, shadeHead.value, fq);
  if (fk === 1) return blocks;
  return keyTokens(res).map((_, j) => blocks[Math.floor(j / fk)] ?? 0);
}

// The token strip: the shown tokens, shaded by the selection's weights in the layer of
// the layer selector (selectionWeights).
function renderTokens(res) {
  const l = selectedIndex(layerSelect);
  shadeLayer.textContent = String(l);
  if (shadeHead.options.length !== res.num_heads + 1) fillHeadChoice(shadeHead, res.num_heads);
  const weights = selectionWeights(res, l);
  const self = isSelfAttention(res);
  tokenStrip(queryStrip, displayTokens(queryTokens(res)), {
    selected: state.selected, weights: self ? weights : null,
    label: self ? "Tokens" : "Queries (decoder tokens)", onSelect: selectToken,
  });
  keyStrip.hidden = self;
  if (!self) {
    tokenStrip(keyStrip, displayTokens(keyTokens(res)), {
      weights, label: "Keys (encoder tokens), shaded by the selected queries' weights",
      onSelect: () => {},
    });
  }
  queryStrip.dataset.selected = [...state.selected].sort((x, y) => x - y).join(",");
}

// The strip shaded by head h of layer l (the one just enlarged); layer l is then the
// layer the layer-based views open on.
function shadeBy(res, l, h) {
  layerSelect.value = String(l);
  if (shadeHead.options.length !== res.num_heads + 1) fillHeadChoice(shadeHead, res.num_heads);
  shadeHead.value = String(h);
  renderTokens(res);
  writeLinkSettings(state.view);
}

// The token box of the overview `res` (a new input clears the selection), shown before
// the view is drawn.
function showTokenBox(res) {
  tokenBox.hidden = false;
  const key = JSON.stringify([queryTokens(res), keyTokens(res)]);
  if (key !== state.selectionTokens) {
    // A link's selection applies to its first input, where it has those rows.
    const linked = [...linkedTokens(state.linked.tokens)];
    const rows = queryTokens(res).length;
    state.selected = new Set(linked.every((q) => q < rows) ? linked : []);
    delete state.linked.tokens;
    state.selectionTokens = key;
  }
  renderTokens(res);
}

// The selection's outlines on the open view, once it is drawn (the maps of the
// selected input: the model, layer and averages views).
async function showSelection(section, res) {
  if (VIEWS[state.view].outlined) await outlineView(section, res);
  section.dataset.selected = queryStrip.dataset.selected;
}

// Position q was chosen (null: clear) in the strip or on a map; `add`: shift-click.
async function selectToken(q, add = false, fromKeyboard = false) {
  const res = state.overview;
  if (!res || !VIEWS[state.view].overview) return;
  state.selected = q === null ? new Set() : nextSelection(state.selected, q, add);
  const section = document.getElementById(`view-${state.view}`);
  renderTokens(res);
  if (fromKeyboard && q !== null) focusToken(queryStrip, q);
  await outlineView(section, res);
  section.dataset.selected = queryStrip.dataset.selected;
  writeLinkSettings(state.view);
}

// A click on a full-resolution map's cell selects its query row.
function bindSelection(div) {
  div.on("plotly_click", (event) => {
    const point = event.points && event.points[0];
    if (point && Number.isInteger(point.y)) selectToken(point.y, additive(event.event));
  });
}

// ---------------------------------------------------------------------------
// Drawing and computing.

// The views of /models, one entry each, as `/` has its VIEWS (lessons.js): how a view is
// drawn, render(section, ctx) with ctx = { res: the overview, layer: the selected layer,
// watcher: the streamed grid's, ticket }, and what it shows around its maps. Defaults:
// drawn from the overview of the selected input, the shared token strip above it, the
// layer select and "hide special tokens" apply, no outlines, not streamed.
const VIEW_DEFAULTS = {
  overview: true, ownTokens: false, outlined: false, layerControl: true, hideSpecial: true,
  streamed: false,
};
// In the order of the tabs (templates/models.html; a test checks).
const VIEWS = Object.fromEntries(Object.entries({
  model: {
    render: (section, ctx) => renderModelView(section, ctx.res, ctx.watcher),
    outlined: true, layerControl: false, streamed: true,
  },
  layer: { render: (section, ctx) => renderLayerView(section, ctx.res, ctx.layer), outlined: true },
  averages: {
    render: (section, ctx) => renderAverages(section, ctx.res, ctx.layer), outlined: true,
  },
  // Compare shows two inputs, the neuron view its own strip (every token).
  compare: { render: (section, ctx) => renderCompare(section, ctx.res, ctx.layer), ownTokens: true },
  lines: { render: (section, ctx) => renderLineView(section, ctx.res, ctx.layer) },
  neuron: {
    render: (section, ctx) => renderNeuronView(section, ctx.res, ctx.layer), ownTokens: true,
  },
  // Generation draws itself (the token explorer), not from the overview.
  generation: {
    render: (section, ctx) => renderGeneration(section, ctx.ticket),
    overview: false, ownTokens: true, layerControl: false, hideSpecial: false,
  },
  // The head atlas: every head scored over a corpus (atlas.js), not from the overview.
  atlas: {
    render: (section, ctx) => renderAtlas(section, ctx.ticket),
    overview: false, ownTokens: true, layerControl: false, hideSpecial: false,
    busyLabel: "Scoring the heads…", // it generates nothing
  },
}).map(([name, view]) => [name, { ...VIEW_DEFAULTS, ...view }]));

// Draws the open view of state.request; resolves to true once drawn, false when refused or
// waiting for the model, null when overtaken by a newer drawing (a tab clicked meanwhile).
async function renderView() {
  if (!state.request) return false;
  const ticket = (state.ticket += 1);
  state.queryTicket += 1;
  controls.hidden = false;
  const section = document.getElementById(`view-${state.view}`);
  section.dataset.drawn = "false";
  const started = performance.now();
  state.shownAt = null;
  const view = VIEWS[state.view];
  const watcher = view.streamed ? modelWatcher(section, ticket) : null;
  if (watcher) section.dataset.firstLayer = "false";
  openTab(state.view);
  writeLinkSettings(state.view);
  layerControl.hidden = !view.layerControl;
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
  if (!done) return false;
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
  return true;
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

// The results are out of date while the form asks for another input than the one they
// were computed for: dimmed under a note with an Update button (cheap changes, the view's
// own options, redraw at once instead).
function updateStale() {
  const m = selectedModel();
  const stale = state.shown !== null && !mediaModality(m) &&
    JSON.stringify(readRequest()) !== state.shown;
  resultsPane.classList.toggle("stale", stale);
  resultsPane.dataset.stale = String(stale);
  staleNote.hidden = !stale;
}

// After a refused Compute nothing of an earlier run stays on screen: the views, the token
// strip and the summary are emptied (the error box says why).
function clearResults() {
  state.shown = null;
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
}

async function compute() {
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
    let drawnView = false;
    try {
      drawnView = await renderView();
    } finally {
      if (run === state.computes) resultsPane.classList.remove("running");
    }
    if (run !== state.computes) return; // overtaken by a newer Compute
    if (drawnView === false && state.pending === null) {
      clearResults(); // refused (the error says why): nothing of an earlier run stays
    }
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

bindMedia(() => compute());
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
  if (m && !mediaModality(m) && m.state !== "failed") compute();
});
// Any edit of the inputs marks the results out of date (updateStale); Ctrl+Enter in a
// text box, or the note's Update button, computes.
form.addEventListener("input", updateStale);
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
onTabClick((view) => {
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
  method: methodSelect.value === "attention" ? null : methodSelect.value,
  target: gradientMethod() ? targetSelect.value || null : null,
  ablate: ablatedHeads().map(([l, h]) => `${l}.${h}`).join(","),
  query: state.view === "generation" && state.queryIndex !== null ? String(state.queryIndex) : null,
}));
state.view = viewFromUrl(state.view);
state.linked = settingsFromUrl();
selectLinked(colourScale, state.linked.scale);
selectLinked(methodSelect, state.linked.method);
if (state.linked.ablate) ablateInput.value = state.linked.ablate.replaceAll(",", " ");
showMethod();
openTab(state.view);
start();
