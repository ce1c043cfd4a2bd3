// The numbers behind the pictures: the shown head's and layer's exact, unpooled maps as
// NumPy .npy and safetensors files (POST /api/v1/models/attention/download), and
// "Reproduce in Python": the attnviz.show() call and the API request that recompute the
// open view with every setting of the page (chat template, generation, heads off, method,
// target, hidden special tokens, merged words).
import { errorText } from "../api.js";
import { download } from "../lib/downloads.js";
import { CONFIG, layerSelect, showError } from "./elements.js";
import { perHeadMethod, viewRequest } from "./form.js";
import { keyTokens, queryTokens } from "./response.js";
import { state } from "./state.js";

const DOWNLOAD_URL = "/api/v1/models/attention/download";
const headButton = document.getElementById("download-head");
const layerButton = document.getElementById("download-layer");
const safetensorsButton = document.getElementById("download-safetensors");
const reproduceButton = document.getElementById("reproduce-button");
const reproducePanel = document.getElementById("reproduce");
const showCode = document.getElementById("reproduce-show");
const apiCode = document.getElementById("reproduce-api");
// The request fields a view's request carries that a file or a show() call does not take.
const DISPLAY_FIELDS = ["encoding", "display_size", "query_index", "top_k", "neuron", "head_index"];

// Whether the open view shows one layer (the layer select applies); else the model view's
// grid (every layer), or a view of its own.
function layerView() {
  return ["layer", "averages", "compare", "lines", "neuron"].includes(state.view);
}

// The layer and head the downloads take: in a view of one layer the selected layer and
// its enlarged head; else the head enlarged last (a click, the jump box, the link's &head=).
export function shownHead() {
  const res = state.overview;
  if (!res) return null;
  const [l, h] = layerView()
    ? [Number(layerSelect.value || 0), state.layerHead]
    : (state.enlargedHead ?? [0, 0]);
  return [Math.min(l, res.num_layers - 1), Math.min(h, res.num_heads - 1)];
}

// The request of the shown input with the view's settings, unpooled: for a file, the
// maps' own method only (a whole-model method's map is not in them: the weights).
function fileRequest(extra, forFile = true) {
  const body = viewRequest(extra);
  for (const field of DISPLAY_FIELDS) if (!(field in extra)) delete body[field];
  if (forFile && !perHeadMethod(body.method)) {
    body.method = "attention";
    delete body.target_index;
  }
  return body;
}

// Bytes of a file of `heads` maps of the shown input (float32, L_q x L_k each).
function fileBytes(res, heads) {
  return heads * queryTokens(res).length * keyTokens(res).length * 4;
}

// The buttons' labels and states for the shown head and layer: "Head L2.H5 .npy",
// "Layer 2 .npy"; a layer's file over the server's limit is offered a head at a time.
export function labelNumbers() {
  const res = state.overview;
  const head = shownHead();
  for (const button of [headButton, layerButton, safetensorsButton, reproduceButton]) {
    button.disabled = !head;
  }
  if (!head) return;
  const [l, h] = head;
  headButton.textContent = `Head L${l}.H${h} .npy`;
  layerButton.textContent = `Layer ${l} .npy`;
  safetensorsButton.textContent = `Layer ${l} .safetensors`;
  const tooBig = fileBytes(res, res.num_heads) > CONFIG.max_download_bytes;
  const mib = (bytes) => `${Math.round(bytes / 2 ** 20).toLocaleString("en")} MiB`;
  for (const button of [layerButton, safetensorsButton]) {
    button.disabled = tooBig;
    button.title = tooBig
      ? `Layer ${l}'s ${res.num_heads} heads would be ${mib(fileBytes(res, res.num_heads))}, ` +
        `over the server's ${mib(CONFIG.max_download_bytes)}: download a head at a time.`
      : `Layer ${l}'s exact maps, every head, unpooled: float32 (H, L_q, L_k), ` +
        `${mib(fileBytes(res, res.num_heads))} at most.`;
  }
  headButton.title = `Head ${h} of layer ${l}, exact and unpooled: float32 (L_q, L_k) for ` +
    "np.load (Go to head or a click chooses another).";
  if (!reproducePanel.hidden) writeSnippets();
}

// Fetch a file of the shown input's maps and save it under the server's name.
async function fetchFile(extra, button) {
  const body = fileRequest(extra);
  button.setAttribute("aria-busy", "true");
  try {
    const response = await fetch(DOWNLOAD_URL, {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
    });
    if (!response.ok) {
      const data = await response.json().catch(() => null);
      showError(errorText(data, response.status));
      return;
    }
    const disposition = response.headers.get("Content-Disposition") || "";
    const name = /filename="([^"]+)"/u.exec(disposition)?.[1] ?? `attnviz.${body.format}`;
    download(name, await response.blob());
  } catch (err) {
    showError(`Download failed: ${err}`);
  } finally {
    button.removeAttribute("aria-busy");
  }
}

// A JSON value as a Python literal (None, True, False, tuples for [layer, head] pairs).
export function pythonLiteral(value, pairs = false) {
  if (value === null || value === undefined) return "None";
  if (value === true) return "True";
  if (value === false) return "False";
  if (typeof value === "string") return JSON.stringify(value);
  if (typeof value === "number") return String(value);
  if (Array.isArray(value)) {
    const items = value.map((v) => pythonLiteral(v));
    return pairs ? `(${items.join(", ")})` : `[${items.join(", ")}]`;
  }
  const entries = Object.entries(value).map(([k, v]) => `    ${JSON.stringify(k)}: ${pythonLiteral(v)},`);
  return `{\n${entries.join("\n")}\n}`;
}

// The attnviz.show() keywords of a view's request, in the API's terms, defaults left out.
function showKeywords(body, layer) {
  const b = body.sequence_index ?? 0;
  const keywords = [];
  const add = (name, value, fallback) => {
    if (value !== undefined && value !== null && value !== fallback) keywords.push([name, value]);
  };
  if (layer !== null) add("layer", layer);
  add("method", body.method, "attention");
  add("text_pair", body.text_pairs?.[b]);
  add("target", body.targets?.[b]);
  add("block", body.block);
  add("chat", body.chat, false);
  add("max_new_tokens", body.max_new_tokens, 0);
  if (body.max_new_tokens) {
    add("temperature", body.temperature, 0);
    if (body.temperature) add("seed", body.seed);
  }
  add("target_index", body.target_index);
  add("target_token_id", body.target_token_id);
  add("hide_special_tokens", body.hide_special_tokens, false);
  add("merge_words", body.merge_words, false);
  add("device", body.device, "auto");
  return keywords;
}

// The two snippets of the open view: attnviz.show() with the page's settings, and the
// request of the shown layer's exact maps from this server.
export function snippets() {
  const head = shownHead();
  const res = state.overview;
  if (!head || !res) return null;
  const [l] = head;
  const settings = fileRequest({}, false);
  const body = fileRequest({ layer_index: l, format: "npy" });
  const b = body.sequence_index ?? 0;
  const keywords = showKeywords(settings, state.view === "model" ? null : l);
  const ablate = (settings.ablate || []).map((pair) => pythonLiteral(pair, true));
  const lines = [
    `    ${pythonLiteral(body.texts[b])},`,
    `    ${pythonLiteral(res.model)},`,
    ...keywords.map(([name, value]) => `    ${name}=${pythonLiteral(value)},`),
    ...(ablate.length ? [`    ablate=[${ablate.join(", ")}],`] : []),
  ];
  const what = state.view === "model" ? "every layer's heads" : `layer ${l}'s heads`;
  const show = [
    `# The ${state.view} view of /models with the page's settings (pip install 'attnviz[pretrained]').`,
    "import attnviz",
    "",
    "view = attnviz.show(",
    ...lines,
    ")",
    `view.maps  # float32 (N, H, L_q, L_k): ${what}, unpooled`,
    "view.details  # what the page shows beside them: tokens, new tokens, target, ...",
    "view  # in a notebook: the interactive view",
  ].join("\n");
  const api = [
    `# Layer ${l}'s exact maps of this input from this server (add "head_index" for one head,`,
    `# "format": "safetensors" for a safetensors file with the tokens in its metadata).`,
    "import io, json, urllib.request",
    "",
    "import numpy as np",
    "",
    `body = ${pythonLiteral(body)}`,
    "request = urllib.request.Request(",
    `    ${JSON.stringify(window.location.origin + DOWNLOAD_URL)},`,
    "    data=json.dumps(body).encode(),",
    '    headers={"Content-Type": "application/json"},',
    ")",
    "with urllib.request.urlopen(request) as response:",
    "    layer = np.load(io.BytesIO(response.read()))  # float32 (H, L_q, L_k)",
  ].join("\n");
  return { show, api };
}

function writeSnippets() {
  const written = snippets();
  showCode.textContent = written ? written.show : "";
  apiCode.textContent = written ? written.api : "";
}

// The buttons: the head's and layer's files, Reproduce in Python (a panel with the two
// snippets and their Copy buttons).
export function bindNumbers() {
  headButton.addEventListener("click", () => {
    const head = shownHead();
    if (head) fetchFile({ layer_index: head[0], head_index: head[1], format: "npy" }, headButton);
  });
  layerButton.addEventListener("click", () => {
    const head = shownHead();
    if (head) fetchFile({ layer_index: head[0], format: "npy" }, layerButton);
  });
  safetensorsButton.addEventListener("click", () => {
    const head = shownHead();
    if (head) fetchFile({ layer_index: head[0], format: "safetensors" }, safetensorsButton);
  });
  reproduceButton.addEventListener("click", () => {
    reproducePanel.hidden = !reproducePanel.hidden;
    reproduceButton.setAttribute("aria-expanded", String(!reproducePanel.hidden));
    if (!reproducePanel.hidden) writeSnippets();
  });
  for (const copy of reproducePanel.querySelectorAll("button[data-copy]")) {
    copy.addEventListener("click", async () => {
      const code = document.getElementById(copy.dataset.copy).textContent;
      try {
        await navigator.clipboard.writeText(code);
        copy.textContent = "Copied";
      } catch {
        copy.textContent = "Select and copy";
      }
      setTimeout(() => { copy.textContent = "Copy"; }, 1500);
    });
  }
  labelNumbers();
}
