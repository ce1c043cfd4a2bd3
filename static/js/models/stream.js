// The overview of the selected input, streamed (POST /api/v1/models/attention/layers):
// its NDJSON lines read as they come (lib/ndjson.js readLines) and assembled into POST
// /attention's one-input response, with its progress box; and the full-resolution maps
// of a pooled overview, fetched once each.
import { PROGRESS_DELAY_MS, decodeArrays, errorText } from "../api.js";
import { readLines } from "../lib/ndjson.js";
import { familySpec, modelInfo } from "./catalog.js";
import {
  layerProgressBar, layerProgressBox, layerProgressFill, layerProgressLabel, showError,
} from "./elements.js";
import { rememberSpecials, viewRequest } from "./form.js";
import { refused } from "./listing.js";
import { keyTokens, poolFactors, queryTokens } from "./response.js";
import { progress, state } from "./state.js";

// The overview streamed: NDJSON lines, a "start" (every field but the maps), one "layer"
// per layer as soon as the server has it, an "end" (the averages) or an "error".
const LAYERS_URL = "/api/v1/models/attention/layers";

const THUMB_SIZE = 64; // thumbnails of longer inputs come block-max pooled to this size

// A progress box's label and bar (the streamed grid's, the head atlas's): `text`, `done`
// of `total` steps (null, or no total: not known yet, the bar waits).
export function drawProgress({ label, bar, fill }, text, done, total) {
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

// The progress of a streamed overview (#layer-progress, in #progress's place): "Running
// the model…" until its first layer, then "Layer k of N…", then "Drawing the grid…" while
// the model view draws it; shown once the stream has lasted PROGRESS_DELAY_MS, hidden when
// its grid is drawn (or, when no grid waits for it, when it ends). Owned by one stream: a
// newer one takes it over.
export const layerProgress = {
  begin(stream, text, total) {
    clearTimeout(progress.timer);
    progress.owner = stream;
    this.set(stream, text, null, total);
    progress.timer = setTimeout(() => {
      if (progress.owner === stream) layerProgressBox.hidden = false;
    }, PROGRESS_DELAY_MS);
  },
  // `done` of `total` layers (null: not known yet, the bar waits).
  set(stream, text, done, total) {
    if (progress.owner !== stream) return;
    drawProgress({ label: layerProgressLabel, bar: layerProgressBar, fill: layerProgressFill },
      text, done, total);
  },
  end(stream) {
    if (progress.owner !== stream) return;
    clearTimeout(progress.timer);
    progress.owner = null;
    layerProgressBox.hidden = true;
  },
};

// The overview of the selected input: every layer and head (pooled to THUMB_SIZE when
// longer), the averages and rollout. Fetched again when the input or the hiding changes,
// streamed layer by layer (streamOverview): `watcher` (the model view's, or null) is told
// of each layer as it comes. A request for the same input while it streams joins that
// stream; one for another input cancels it. Resolves to the whole response, the one-input
// response of POST /attention, or null (refused, failed, or cancelled by a newer one).
export async function overview(watcher = null) {
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
  const generating = familySpec(model).generates && body.max_new_tokens > 0;
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

// POST body to LAYERS_URL and hand each NDJSON line to onLine as it comes (lib/ndjson.js
// readLines): resolves to onLine's first result that is not undefined, to undefined when
// the answer ended first, or to null once a refusal (as requestAttention's) or a failure
// is shown, or when `signal` cancelled it.
async function fetchLines(body, onLine, signal = undefined) {
  try {
    const response = await fetch(LAYERS_URL, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
      signal,
    });
    if (!response.ok) {
      const data = await response.json().catch(() => null);
      if (signal && signal.aborted) return null;
      await refused(body.model, errorText(data, response.status));
      return null;
    }
    return await readLines(response, onLine);
  } catch (err) {
    if (signal && signal.aborted) return null;
    showError(`Request failed: ${err}`);
    return null;
  }
}

async function readStream(stream) {
  // The "end" or "error" line is the last (takeLine: the result, or null).
  const result = await fetchLines(stream.body, (line) => takeLine(stream, line),
    stream.controller.signal);
  if (result !== undefined) return result;
  showError(`The answer ended after ${stream.layers} of ${stream.total ?? "?"} layers; ` +
    "compute again.");
  return null;
}

// One layer of one input at full resolution (body.layer_index; only head body.head_index
// when given), read off the stream as the overview is: {...the start line's fields (model,
// tokens, ...), attentions: (H', L_q, L_k), headMean: (L_q, L_k)}, or null once the error
// is shown.
export async function requestLayer(body) {
  let start = null;
  let layer = null;
  const result = await fetchLines(body, (line) => {
    if (line.type === "start") start = decodeArrays(line);
    else if (line.type === "layer") layer = line;
    else if (line.type === "error") {
      showError(String(line.detail));
      return null;
    } else if (line.type === "end") {
      return start && layer && {
        ...start, attentions: decodeArrays(layer.attentions), headMean: decodeArrays(layer.head_mean),
      };
    }
    return undefined;
  });
  state.answeredAt = performance.now();
  if (result) return result;
  if (result !== null) showError("The answer ended before its layer; compute again.");
  return null;
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
      average_downsample: end.average_downsample, pass_key: end.pass_key ?? null,
    };
  }
  if (line.type === "error") {
    showError(String(line.detail));
    return null;
  }
  return undefined; // a kind of line this page does not know: skipped
}

// The most rows and columns a view fetches one layer's or one head's maps with. A longer
// input's come block-max pooled to it (the request's display_size), as the overview's
// thumbnails are: every request the page makes fits the server's limits at every admitted
// length (at 8,192 tokens, SmolLM2's 9 heads of a layer at 256 x 256 are 0.6 M numbers
// where the full maps would be 600 M), and a figure never has more cells than these
// sides allow, so it draws in about a second.
export const MAP_SIDES = Object.freeze({
  layer: 256, // the layer view's compact grid (maps of 70 to 170 px)
  lines: 256, // the line view's rows (20 px each)
  average: 512, // a layer's head average (as the server pools the layer mean and rollout)
  compare: 512, // compare's maps and their difference
  head: 1024, // an enlarged head
});

// What a request of layer maps of `res`'s input at most `side` per side adds to the view's
// request: display_size when the input is longer (res counts the shown tokens).
function sized(res, side, extra) {
  const long = Math.max(queryTokens(res).length, keyTokens(res).length) > side;
  return viewRequest({ ...extra, ...(long ? { display_size: side } : {}) });
}

// The maps of layer l at most `side` (a MAP_SIDES value) per side: {attentions: H x P_q x
// P_k, headMean: P_q x P_k, factor, keyFactor} (tokens per pooled row and column, 1 at full
// resolution). From the overview when it is not pooled and short enough, else fetched once
// per layer and side.
export async function layerMaps(res, l, side) {
  const [P_q, P_k] = [queryTokens(res).length, keyTokens(res).length];
  if (!res.downsample && Math.max(P_q, P_k) <= side) {
    return { attentions: res.attentions[l][0], headMean: res.head_mean[l][0], factor: 1, keyFactor: 1 };
  }
  const key = `${l}/${side}`;
  if (!state.layers.has(key)) {
    const layer = await requestLayer(sized(res, side, { layer_index: l }));
    if (layer === null) return null;
    const [factor, keyFactor] = poolFactors(layer.downsample);
    state.layers.set(key, { attentions: layer.attentions, headMean: layer.headMean, factor, keyFactor });
  }
  return state.layers.get(key);
}

// One head's map at most MAP_SIDES.head per side: {z: P_q x P_k, factor, keyFactor}. From
// the overview when it is not pooled, from its layer when that was fetched at full
// resolution (a short input's), else only that head (layer_index and head_index).
export async function headMap(res, l, h) {
  if (!res.downsample) {
    return { z: res.attentions[l][0][h], factor: 1, keyFactor: 1 };
  }
  for (const [key, maps] of state.layers) {
    if (key.startsWith(`${l}/`) && maps.factor === 1 && maps.keyFactor === 1) {
      return { z: maps.attentions[h], factor: 1, keyFactor: 1 };
    }
  }
  const key = `${l},${h}`;
  if (!state.heads.has(key)) {
    const layer = await requestLayer(sized(res, MAP_SIDES.head, { layer_index: l, head_index: h }));
    if (layer === null) return null;
    const [factor, keyFactor] = poolFactors(layer.downsample);
    const [z] = layer.attentions; // (1, P_q, P_k): the one head asked for
    state.heads.set(key, { z, factor, keyFactor });
  }
  return state.heads.get(key);
}
