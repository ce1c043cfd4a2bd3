// The form of /models and the view's controls: its inputs follow the chosen model's
// family; the request read from them (readRequest) and filled from a link (fillForm); the
// requests of the views (viewRequest) with the method, its target and the heads switched
// off; the colour scale; whether the results on screen are out of date (updateStale).
import {
  COMPACT, fillIndexSelect, nonEmptyLines, parseNumber, selectLinked, selectedIndex,
} from "../api.js";
import { resolveScale } from "../heatmap.js";
import { mediaModality, showMediaInputs } from "../media.js";
import { displayToken } from "../lib/display.js";
import { familySpec, modelInfo, selectedModel } from "./catalog.js";
import {
  CONFIG, ablateInput, blockSelect, chatBox, chatControl, chatHint, colourScale, deviceSelect,
  generationControl, generationTab, hideSpecial, layerSelect, mergeWords, methodSelect,
  modelSelect, newTokensInput, pairsBox, pairsControl, resultsPane, seedInput, sequenceLabel,
  sequenceSelect, specialExamples, staleNote, targetSelect, targetsBox, targetsControl,
  oneTextBox, oneTextControl, temperatureInput, textsBox, textsHint, textsInputs, textsLabel,
} from "./elements.js";
import { queryTokens } from "./response.js";
import { promptImage, state } from "./state.js";

const DEFAULT_TEXT = "The cat sat on the mat because it was tired.";
const DEFAULT_PROMPT = "What is the capital of France?";
const DEFAULT_TARGET = "Le chat était assis sur le tapis.";
const DEFAULT_NEW_TOKENS = 8;

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
export function adaptInputs(defaults) {
  const m = selectedModel();
  showMediaInputs(m);
  const spec = familySpec(m);
  const decoder = spec.generates;
  const encDec = spec.targets;
  const known = spec.name !== null; // a model still loading has no family yet
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
  pairsControl.hidden = !spec.text_pairs;
  // A vision-language model's image input (models/prompt_image.js listens: a first one
  // gets the sample picture).
  const imageControl = document.getElementById("prompt-image-control");
  imageControl.hidden = !spec.reads_images;
  if (spec.reads_images) imageControl.dispatchEvent(new Event("reads-images"));
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

// Whether a text has paragraphs (a blank line between two lines of text): a pasted
// document, which is one input whole. A blank line alone never splits a text.
function hasParagraphs(value) {
  return /\S[ \t]*\r?\n[ \t]*\r?\n\s*\S/u.test(value);
}

// The inputs #texts makes: one per non-empty line; the whole text, its line breaks kept,
// when it has paragraphs or "keep it as one text" is checked.
export function textInputs() {
  const value = textsBox.value;
  if (oneTextBox.checked || hasParagraphs(value)) {
    const whole = value.trim();
    return whole ? [whole] : [];
  }
  return nonEmptyLines(value);
}

// Say under #texts how many inputs its text makes (#texts-count), and offer to keep a
// text of several lines as one.
export function describeInputs() {
  const lines = nonEmptyLines(textsBox.value).length;
  const paragraphs = hasParagraphs(textsBox.value);
  const count = textInputs().length;
  const noun = textsLabel.textContent.split(" ")[0].toLowerCase().replace(/s$/u, "");
  oneTextControl.hidden = lines <= 1 || paragraphs;
  if (lines <= 1) textsInputs.textContent = "";
  else if (paragraphs) {
    const parts = textsBox.value.trim().split(/\r?\n[ \t]*\r?\n\s*/u).length;
    textsInputs.textContent = `one ${noun} of ${parts} paragraphs (a blank line keeps a text whole)`;
  } else if (count === 1) textsInputs.textContent = `one ${noun} of ${lines} lines`;
  else textsInputs.textContent = `${count} lines: ${count} ${noun}s, one per line`;
}

export function readRequest() {
  const m = selectedModel();
  const spec = familySpec(m);
  const texts = textInputs();
  const request = { model: modelSelect.value || null, texts, device: deviceSelect.value };
  // A vision-language model's image goes with its prompt (base64, the data: URL's header off).
  if (spec.reads_images && promptImage.dataUrl) {
    request.images = [promptImage.dataUrl.slice(promptImage.dataUrl.indexOf(",") + 1)];
  }
  if (spec.generates) {
    request.chat = chatBox.checked && !chatBox.disabled;
    request.max_new_tokens = parseNumber(newTokensInput.value);
    request.temperature = parseNumber(temperatureInput.value);
    request.seed = parseNumber(seedInput.value);
    return request;
  }
  if (spec.targets) {
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
export function fillForm(request) {
  if (request.model && modelInfo(request.model)) modelSelect.value = request.model;
  adaptInputs(true);
  const decoder = familySpec(selectedModel()).generates;
  const texts = request.texts || [decoder ? DEFAULT_PROMPT : DEFAULT_TEXT];
  textsBox.value = texts.join("\n");
  // one text of several lines (a link's) stays one text
  oneTextBox.checked = texts.length === 1 && texts[0].includes("\n");
  describeInputs();
  pairsBox.value = (request.text_pairs || []).map((p) => p ?? "").join("\n");
  if (request.device) deviceSelect.value = request.device;
  fillOptions(request);
}

// The options of a request beyond the texts: decoders' and encoder-decoders'.
export function fillOptions(request) {
  if (isBoolean(request.chat) && !chatBox.disabled) chatBox.checked = request.chat;
  if (isCount(request.max_new_tokens)) newTokensInput.value = String(request.max_new_tokens);
  if (isNumber(request.temperature)) temperatureInput.value = String(request.temperature);
  if (isCount(request.seed)) seedInput.value = String(request.seed);
  if (isStrings(request.targets)) targetsBox.value = request.targets.join("\n");
  if (BLOCKS.includes(request.block)) blockSelect.value = request.block;
}


// The special tokens of a response (those its special_tokens_mask marks), kept per model
// for the "hide special tokens" hint.
export function rememberSpecials(res) {
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
export function viewRequest(extra) {
  return {
    ...state.request,
    ...COMPACT,
    sequence_index: selectedIndex(sequenceSelect),
    // Hiding and merging renormalise weights: not with another method (the API refuses),
    // nor with heads off (its positions count every token).
    // ... nor with images (the image tokens keep their positions).
    hide_special_tokens: hideSpecial.checked && !otherMethod() && !ablatedHeads().length &&
      !state.request.images,
    merge_words: mergeWords.checked && !otherMethod() && !ablatedHeads().length &&
      !state.request.images,
    // A whole-model method is drawn in one view only (METHOD_VIEWS): the other views ask
    // for the weights, so a long input past flow's bound still shows them there.
    method: requestedMethod(),
    ...(GRADIENT_METHODS.has(requestedMethod()) && chosenTarget() !== ""
      ? { target_index: Number(chosenTarget()) } : {}),
    ...(ablatedHeads().length ? { ablate: ablatedHeads() } : {}),
    ...extra,
  };
}

export function populateSelectors(request, numLayers) {
  fillIndexSelect(sequenceSelect, request.texts.map(
    (text, b) => `${b}: ${text.length > 40 ? `${text.slice(0, 40)}…` : text}`,
  ));
  fillIndexSelect(layerSelect, Array.from({ length: numLayers }, (_, l) => `Layer ${l}`));
  selectLinked(sequenceSelect, state.linked.sequence);
  selectLinked(layerSelect, state.linked.layer);
  delete state.linked.sequence;
  delete state.linked.layer;
}

// ---------------------------------------------------------------------------
// The method (#method): what every map holds (the API's `method`).

// Each method as the server's method registry describes it (attnviz.pretrained.methods,
// through models-config): its label, note, what one number of its maps is, whether it
// needs a gradient target, the views that draw it (null: every view).
const METHOD_SPECS = Object.fromEntries(CONFIG.method_specs.map((m) => [m.name, m]));
// The softmax weights: the method that assumes nothing else (the picker's first).
const WEIGHTS = CONFIG.method_specs.find((m) => !m.assumes_weights).name;
// The views that draw each whole-model method; the others ask for the weights.
export const METHOD_VIEWS = Object.fromEntries(
  CONFIG.method_specs.filter((m) => m.views).map((m) => [m.name, m.views]));

export function otherMethod() {
  return methodSelect.value !== WEIGHTS;
}

// Whether a response's method is the softmax weights, or one whose quantity replaces them
// in every map (norm-based attention: no rollout).
export function weightsMethod(method) {
  return method === WEIGHTS;
}
export function perHeadMethod(method) {
  return Boolean(METHOD_SPECS[method]?.per_head);
}

const GRADIENT_METHODS = new Set(
  CONFIG.method_specs.filter((m) => m.gradient).map((m) => m.name));

export function gradientMethod() {
  return GRADIENT_METHODS.has(methodSelect.value);
}

// The method the open view asks the API for.
function requestedMethod() {
  const views = METHOD_VIEWS[methodSelect.value];
  return views && !views.includes(state.view) ? WEIGHTS : methodSelect.value;
}

// The target position chosen (#target-index), "" for the default; before the select is
// filled (the first response), the link's.
function chosenTarget() {
  return targetSelect.options.length ? targetSelect.value : (state.linked.target ?? "");
}

// The most positions #target-index lists (a gradient method's pass keeps every layer's
// weights: the server refuses inputs far shorter than this).
const MAX_TARGET_OPTIONS = 4096;

// The positions a gradient method's target can take (#target-index): the shown tokens
// when they are the outputs (not an encoder-decoder's encoder block), else only the default.
export function fillTargets(res) {
  const outputs = !familySpec(res).targets || res.block !== "encoder";
  // Past MAX_TARGET_OPTIONS tokens (longer than the gradient methods take), the default
  // alone: no option per token.
  const tokens = outputs && queryTokens(res).length <= MAX_TARGET_OPTIONS ? queryTokens(res) : [];
  // The server's default: an encoder's first token, else the last that is neither special
  // nor whitespace (gradients.py last_content_position; res.target names it once computed).
  const last = familySpec(res).gradient_target === "embedding" ? "first token" : "last word's token";
  const labels = [`${last} (default)`, ...tokens.map((t, i) => `${i}: ${displayToken(t)}`)];
  const values = ["", ...tokens.map((_, i) => String(i))];
  const key = labels.join("\n");
  if (targetSelect.dataset.key === key) return;
  const kept = state.linked.target ?? targetSelect.value;
  delete state.linked.target;
  targetSelect.replaceChildren(...values.map((value, i) => new Option(labels[i], value)));
  targetSelect.value = values.includes(kept) ? kept : "";
  targetSelect.dataset.key = key;
}

// What the maps hold, for hovers and colour bars.
export function valueName() {
  return METHOD_SPECS[methodSelect.value]?.value_name ?? "weight";
}

// ---------------------------------------------------------------------------
// Heads off (#ablate): "layer.head" pairs the API switches off (its `ablate`).

// The pairs typed in #ablate, [[layer, head], ...]; the malformed ones left out (and the
// field marked).
export function ablatedHeads() {
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

// ---------------------------------------------------------------------------
// The colour scale (#colour-scale).

// The colour-scale choice (#colour-scale) for maps of `rows` queries: auto is per row for
// causal maps (a decoder's, or an encoder-decoder's decoder block: row 0's single weight
// 1.0 would otherwise wash out the rest) and above AUTO_ROW_LEN queries, per head below
// (heatmap.js colourBar says what each mode means).
export function colourMode(rows) {
  return resolveScale(colourScale.value, rows, causalMaps() ? "row" : "head");
}

export function causalMaps() {
  const request = state.request;
  if (!request) return false;
  const spec = familySpec(modelInfo(request.model));
  return spec.causal_blocks.includes(request.block || spec.blocks[0]);
}

// ---------------------------------------------------------------------------
// Results out of date.

// The results are out of date while the form asks for another input than the one they
// were computed for: dimmed under a note with an Update button (cheap changes, the view's
// own options, redraw at once instead).
export function updateStale() {
  const m = selectedModel();
  const wanted = JSON.stringify(readRequest());
  // Not while the form's own request is being computed: the results on screen are then
  // the previous input's, and the progress says the new ones are coming.
  const computing = state.computing !== null && state.computing === wanted;
  const stale = state.shown !== null && !mediaModality(m) && wanted !== state.shown && !computing;
  resultsPane.classList.toggle("stale", stale);
  resultsPane.dataset.stale = String(stale);
  staleNote.hidden = !stale;
}
