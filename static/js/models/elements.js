// The elements of /models (templates/models.html) that its modules use, looked up once
// here, the page's configuration and its error box.
import { errorBox } from "../api.js";

// What the server says, not repeated here (templates/models.html, from the request
// schema's bounds and attnviz.pretrained.methods): the methods, the gradient methods, the
// most next-token candidates a response carries.
export const CONFIG = JSON.parse(document.getElementById("models-config").textContent);

export const form = document.getElementById("model-form");
export const modelSelect = document.getElementById("model");
export const colourScale = document.getElementById("colour-scale");
export const tokenBox = document.getElementById("token-box");
export const mergeWords = document.getElementById("merge-words");
export const neuronHead = document.getElementById("neuron-head");
export const compareSentence = document.getElementById("compare-sentence");
export const compareHead = document.getElementById("compare-head");
export const compareModel = document.getElementById("compare-model");
export const shadeHead = document.getElementById("shade-head");
export const shadeLayer = document.getElementById("shade-layer");
export const queryStrip = document.getElementById("query-strip");
export const keyStrip = document.getElementById("key-strip");
export const modelDescription = document.getElementById("model-description");
export const pathNote = document.getElementById("path-note");
export const textsBox = document.getElementById("texts");
export const textsLabel = document.getElementById("texts-label");
export const textsHint = document.getElementById("texts-hint");
export const textsInputs = document.getElementById("texts-inputs");
export const oneTextBox = document.getElementById("one-text");
export const oneTextControl = document.getElementById("one-text-control");
export const chatControl = document.getElementById("chat-control");
export const chatBox = document.getElementById("chat");
export const chatHint = document.getElementById("chat-hint");
export const pairsControl = document.getElementById("pairs-control");
export const pairsBox = document.getElementById("text-pairs");
export const targetsControl = document.getElementById("targets-control");
export const targetsBox = document.getElementById("targets");
export const blockSelect = document.getElementById("block");
export const generationControl = document.getElementById("generation-control");
export const newTokensInput = document.getElementById("max-new-tokens");
export const temperatureInput = document.getElementById("temperature");
export const seedInput = document.getElementById("seed");
export const deviceSelect = document.getElementById("device");
export const summary = document.getElementById("summary");
export const displayNote = document.getElementById("display-note");
export const sequenceLabel = document.getElementById("sequence-label");
export const sequenceSelect = document.getElementById("sequence-index");
export const layerSelect = document.getElementById("layer-index");
export const layerControl = document.getElementById("layer-control");
export const hideSpecial = document.getElementById("hide-special");
export const methodSelect = document.getElementById("method");
export const ablateInput = document.getElementById("ablate");
export const restoreHeads = document.getElementById("restore-heads");
export const ablationNote = document.getElementById("ablation-note");
export const methodNote = document.getElementById("method-note");
export const targetSelect = document.getElementById("target-index");
export const targetControl = document.getElementById("target-control");
export const importanceBox = document.querySelector("#view-model .importance");
export const hideSpecialControl = document.getElementById("hide-special-control");
export const specialExamples = document.getElementById("special-examples");
export const computeButton = document.getElementById("compute");
export const controls = document.querySelector(".results .controls");
export const layerProgressBox = document.getElementById("layer-progress");
export const layerProgressLabel = document.getElementById("layer-progress-label");
export const layerProgressBar = document.getElementById("layer-progress-bar");
export const layerProgressFill = layerProgressBar.querySelector(".layer-progress-fill");
export const generationTab = document.querySelector(".tabs button[data-view=generation]");
export const resultsPane = document.querySelector(".results");
export const staleNote = document.getElementById("stale-note");
export const refreshButton = document.getElementById("refresh");
export const atlasOwn = document.getElementById("atlas-own");
export const headJump = document.getElementById("head-jump");
export const headJumpControl = document.getElementById("head-jump-control");

// The request fields the API's messages name, by the page's control that sets them: an
// error reads "Prompts: ..." (the control's own label), not "texts: ...".
const FIELD_CONTROLS = {
  model: "model", texts: "texts", text_pairs: "text-pairs", targets: "targets", chat: "chat",
  block: "block", max_new_tokens: "max-new-tokens", temperature: "temperature", seed: "seed",
  device: "device", sequence_index: "sequence-index", layer_index: "layer-index",
  head_index: "neuron-head", method: "method", target_index: "target-index",
  target_token_id: "target-index", ablate: "ablate", hide_special_tokens: "hide-special",
  merge_words: "merge-words",
};

// The visible label of control `id`, without its hint ("Prompts", "Heads off").
function controlLabel(id) {
  if (id === "texts") return textsLabel.textContent;
  const control = document.getElementById(id);
  const label = document.querySelector(`label[for="${id}"]`) || (control && control.closest("label"));
  if (!label) return null;
  const copy = label.cloneNode(true);
  for (const hint of copy.querySelectorAll(".hint, input")) hint.remove();
  return copy.textContent.trim() || null;
}

// An API message with each line's leading field ("texts[1]: ...", "ablate: ...") named by
// its control ("Prompts (line 2): ...", "Heads off: ...").
export function inControlTerms(message) {
  return String(message).split("\n").map((line) => {
    const match = /^([a-z_]+)((?:\[\d+\])*)(?:\.[\w.[\]]+)?: /u.exec(line);
    const label = match && FIELD_CONTROLS[match[1]] && controlLabel(FIELD_CONTROLS[match[1]]);
    if (!label) return line;
    const index = /^\[(\d+)\]/u.exec(match[2]);
    const where = index && ["texts", "text_pairs", "targets"].includes(match[1])
      ? ` (line ${Number(index[1]) + 1})` : "";
    return `${label}${where}: ${line.slice(match[0].length)}`;
  }).join("\n");
}

export const errorElement = document.getElementById("error");
const errors = errorBox(errorElement);
export const showError = (message) => errors.show(inControlTerms(message));
export const clearError = errors.clear;

// The speech and image views' elements (media.js bindMedia).
const mediaSection = document.getElementById("media-view");
export const mediaElements = {
  modelForm: form,
  results: document.querySelector("section.results"),
  speechControl: document.getElementById("speech-control"),
  imageControl: document.getElementById("image-control"),
  audioFile: document.getElementById("audio-file"),
  imageFile: document.getElementById("image-file"),
  recordButton: document.getElementById("record"),
  sampleButton: document.getElementById("sample-audio"),
  audioStatus: document.getElementById("audio-status"),
  imageStatus: document.getElementById("image-status"),
  view: mediaSection,
  head: mediaSection.querySelector(".media-head"),
  controls: mediaSection.querySelector(".media-controls"),
  note: mediaSection.querySelector(".media-note"),
  body: mediaSection.querySelector(".media-body"),
  grid: mediaSection.querySelector(".media-grid"),
};
