// AttnViz on /models for speech and images: a Whisper model transcribes an uploaded or
// recorded clip and shows each transcribed token's cross attention over the audio, under
// the waveform, with time in seconds (and the encoder's self-attention over frames, the
// decoder's over tokens); a vision transformer shows one token's attention (the [CLS]
// token, or a clicked patch) as an overlay on the image, per layer and head, with rollout.
import { jsonFetcher, option } from "./api.js";
import {
  WEIGHT_COLORSCALE, addPlot, clearPlots, escapeForPlotly, scaledWeights,
} from "./heatmap.js";

const SPEECH_URL = "/api/v1/speech";
const VISION_URL = "/api/v1/vision";
const SAMPLE_URL = "/static/samples/the-cat-sat.flac";
const MAX_RECORD_MS = 29500; // within Whisper's 30 s window, with the recorder's latency
const ALIGNMENT = "alignment";
const MEAN = "mean";
const ROLLOUT = "rollout";
// Transparent at 0, so the image shows through where a patch gets no attention.
// At most 60% opaque: the picture stays visible under the most attended patches.
const OVERLAY_COLORSCALE = [
  [0, "rgba(255,255,255,0)"], [0.25, "rgba(254,217,118,0.3)"], [0.5, "rgba(253,141,60,0.42)"],
  [0.75, "rgba(227,26,28,0.52)"], [1, "rgba(128,0,38,0.6)"],
];
const SMALL = { l: 4, r: 4, t: 22, b: 4 };

const modelForm = document.getElementById("model-form");
const results = document.querySelector("section.results");
const speechControl = document.getElementById("speech-control");
const imageControl = document.getElementById("image-control");
const audioFile = document.getElementById("audio-file");
const imageFile = document.getElementById("image-file");
const recordButton = document.getElementById("record");
const sampleButton = document.getElementById("sample-audio");
const audioStatus = document.getElementById("audio-status");
const imageStatus = document.getElementById("image-status");
const view = document.getElementById("media-view");
const head = view.querySelector(".media-head");
const controls = view.querySelector(".media-controls");
const note = view.querySelector(".media-note");
const body = view.querySelector(".media-body");
const grid = view.querySelector(".media-grid");

const media = {
  audio: null, // {blob, name} of the clip to transcribe
  image: null, // {blob, name} of the image
  query: 0, // the image token whose attention is shown
  speech: null, // the last speech response
  vision: null, // the last vision response
  token: null, // the selected transcribed token (row of the cross block), or null
  recorder: null,
  submit: null, // starts a computation (the page's Compute)
};

// "speech" or "image" for a model that reads them, null for a text model.
export function mediaModality(model) {
  const modality = model && model.modality;
  return modality === "speech" || modality === "image" ? modality : null;
}

// Show the chosen model's inputs and views: the text ones, or the speech or image ones.
export function showMediaInputs(model) {
  const modality = mediaModality(model);
  modelForm.classList.toggle("media-mode", modality !== null);
  results.classList.toggle("media-mode", modality !== null);
  speechControl.hidden = modality !== "speech";
  imageControl.hidden = modality !== "image";
  if (modality === null) return;
  const shown = modality === "speech" ? media.speech : media.vision;
  if (!shown || shown.model !== model.name) {
    clearPlots(body);
    clearPlots(grid);
    head.replaceChildren();
    controls.replaceChildren();
    note.textContent = modality === "speech"
      ? "Choose an audio file, record one, or use the sample sentence."
      : "Choose an image: the overlay shows where its [CLS] token looks.";
  }
}

// Compute the chosen model's view: transcribe the clip or run the image. Throws an Error
// with the API's message when it is refused; resolves to a summary line.
export async function computeMedia(model, device) {
  if (model.modality === "speech") {
    if (!media.audio) throw new Error("Choose an audio file, record one, or use the sample sentence.");
    const res = await post(SPEECH_URL, { audio: media.audio, model: model.name, device });
    media.speech = res;
    media.token = null;
    drawSpeech();
    return `${res.model} heard ${res.duration_s.toFixed(1)} s: "${res.text}" (transcribed in ` +
      `${Math.round(res.transcribe_ms)} ms, attention recorded in ${Math.round(res.compute_ms)} ms, ${res.device})`;
  }
  if (!media.image) throw new Error("Choose an image file.");
  const res = await post(VISION_URL, {
    image: media.image, model: model.name, device, query: media.query,
  });
  media.vision = res;
  drawVision();
  return `${res.model} (${res.architecture}): ${res.grid[0]} × ${res.grid[1]} patches of ` +
    `${res.patch_size} px and ${res.prefix.join(", ")}; ${res.num_layers} layers × ` +
    `${res.num_heads} heads in ${Math.round(res.compute_ms)} ms (${res.device})`;
}

// The file inputs, the recorder and the sample start a computation through `submit`.
export function bindMedia(submit) {
  media.submit = submit;
  audioFile.addEventListener("change", () => {
    const file = audioFile.files[0];
    if (!file) return;
    media.audio = { blob: file, name: file.name };
    audioStatus.textContent = `${file.name} (${Math.round(file.size / 1024)} KB)`;
    submit();
  });
  imageFile.addEventListener("change", () => {
    const file = imageFile.files[0];
    if (!file) return;
    media.image = { blob: file, name: file.name };
    media.query = 0;
    imageStatus.textContent = `${file.name} (${Math.round(file.size / 1024)} KB)`;
    submit();
  });
  sampleButton.addEventListener("click", async () => {
    const response = await fetch(SAMPLE_URL);
    media.audio = { blob: await response.blob(), name: "the-cat-sat.flac" };
    audioStatus.textContent = "The sample: \"The cat sat on the mat because it was tired.\" (espeak-ng)";
    submit();
  });
  recordButton.addEventListener("click", toggleRecording);
}

async function toggleRecording() {
  if (media.recorder) {
    media.recorder.stop();
    return;
  }
  if (!navigator.mediaDevices || !window.MediaRecorder) {
    audioStatus.textContent = "This browser cannot record here (it needs https or localhost).";
    return;
  }
  let stream;
  try {
    stream = await navigator.mediaDevices.getUserMedia({ audio: true });
  } catch (error) {
    audioStatus.textContent = `No microphone: ${error.message}`;
    return;
  }
  const recorder = new MediaRecorder(stream);
  const chunks = [];
  recorder.addEventListener("dataavailable", (event) => chunks.push(event.data));
  recorder.addEventListener("stop", () => {
    clearTimeout(recorder.limit);
    for (const track of stream.getTracks()) track.stop();
    media.recorder = null;
    recordButton.classList.remove("recording");
    recordButton.textContent = "● Record";
    const type = recorder.mimeType || "audio/webm";
    const blob = new Blob(chunks, { type });
    const extension = type.includes("ogg") ? "ogg" : (type.includes("mp4") ? "m4a" : "webm");
    media.audio = { blob, name: `recording.${extension}` };
    audioStatus.textContent = `Recorded ${Math.round(blob.size / 1024)} KB (${type}).`;
    media.submit();
  });
  recorder.start();
  recorder.limit = setTimeout(() => recorder.stop(), MAX_RECORD_MS);
  media.recorder = recorder;
  recordButton.classList.add("recording");
  recordButton.textContent = "■ Stop and transcribe";
  audioStatus.textContent = "Recording… (up to 30 s)";
}

async function post(url, fields) {
  const form = new FormData();
  for (const [key, value] of Object.entries(fields)) {
    if (value && value.blob) form.append(key, value.blob, value.name);
    else if (value !== null && value !== undefined) form.append(key, String(value));
  }
  // Speech's maps are large (30 s: 4.4 M cross-attention weights): float16 halves them,
  // and its 3 significant digits are more than a colour and a 4-decimal hover show.
  form.append("encoding", url === SPEECH_URL ? "base64_float16" : "base64_float32");
  let message = null;
  const res = await jsonFetcher((text) => { message = text; })(url, form);
  if (res === null) throw new Error(message);
  return res;
}

function select(id, label, choices, value, onChange) {
  const wrap = document.createElement("span");
  const tag = document.createElement("label");
  tag.htmlFor = id;
  tag.textContent = label;
  const element = document.createElement("select");
  element.id = id;
  for (const [v, text] of choices) element.append(option(v, text));
  element.value = String(value);
  element.addEventListener("change", () => onChange(element.value));
  wrap.append(tag, " ", element);
  controls.append(wrap);
  return element;
}

const range = (n) => Array.from({ length: n }, (_, i) => i);

function meanOf(maps) {
  const rows = maps[0].length;
  const cols = maps[0][0].length;
  const out = range(rows).map(() => new Array(cols).fill(0));
  for (const map of maps) {
    for (let i = 0; i < rows; i += 1) {
      for (let j = 0; j < cols; j += 1) out[i][j] += map[i][j] / maps.length;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// Speech.

const speechView = { block: "cross", layer: ALIGNMENT, head: MEAN };

function speechMap(res, block, layer, headChoice) {
  const weights = res.blocks[block].weights;
  if (block === "cross" && layer === ALIGNMENT) {
    return meanOf(res.alignment_heads.map(([l, h]) => weights[l][h]));
  }
  const heads = weights[Number(layer)];
  return headChoice === MEAN ? meanOf(heads) : heads[Number(headChoice)];
}

function isAlignment(res, l, h) {
  return res.alignment_heads.some(([al, ah]) => al === l && ah === h);
}

function drawSpeech() {
  const res = media.speech;
  const numLayers = res.blocks.cross.weights.length;
  const numHeads = res.blocks.cross.weights[0].length;
  const aligned = res.alignment_heads.length > 0;
  // The choices of another model, or of a block without alignment heads, fall back.
  if (speechView.layer === ALIGNMENT && (speechView.block !== "cross" || !aligned)) {
    speechView.layer = "0";
  }
  if (speechView.layer !== ALIGNMENT && Number(speechView.layer) >= numLayers) speechView.layer = "0";
  if (speechView.head !== MEAN && Number(speechView.head) >= numHeads) speechView.head = MEAN;
  controls.replaceChildren();
  select("speech-block", "Block", [
    ["cross", "cross: each token over the audio"],
    ["encoder", "encoder: audio frames over frames"],
    ["decoder", "decoder: tokens over tokens"],
  ], speechView.block, (v) => { speechView.block = v; drawSpeech(); });
  const layers = range(numLayers).map((l) => [String(l), `layer ${l}`]);
  if (speechView.block === "cross" && aligned) layers.unshift([ALIGNMENT, "alignment heads (mean)"]);
  select("speech-layer", "Layer", layers, speechView.layer, (v) => {
    speechView.layer = v;
    drawSpeech();
  });
  const headSelect = select("speech-head", "Head", [[MEAN, "mean of heads"],
    ...range(numHeads).map((h) => [String(h), `head ${h}`])], speechView.head, (v) => {
    speechView.head = v;
    drawSpeech();
  });
  headSelect.disabled = speechView.layer === ALIGNMENT;
  drawTranscript(res);
  clearPlots(body);
  clearPlots(grid);
  const map = speechMap(res, speechView.block, speechView.layer, speechView.head);
  const which = speechView.layer === ALIGNMENT
    ? `the mean of the ${res.alignment_heads.length} alignment heads`
    : `layer ${speechView.layer}, ${speechView.head === MEAN ? "mean of heads" : `head ${speechView.head}`}`;
  if (speechView.block === "cross") {
    note.textContent = `Each row is a transcribed token; its cells are the attention over the audio ` +
      `(20 ms frames) of the decoder position that produced it, ${which}. Colours are scaled ` +
      `per row (the darkest: the row's largest weight; hover for the weight). Frames past the ` +
      `audio (Whisper pads to 30 s) are not drawn. Outlined thumbnails are the alignment heads ` +
      `the model's config names; click one to draw it.`;
    addPlot(body, crossFigure(res, map, which), "plot speech-cross");
  } else if (speechView.block === "encoder") {
    note.textContent = `Self-attention of the encoder over the audio's frames (20 ms each` +
      `${res.blocks.encoder.frames_per_cell > 1 ? `, ${res.blocks.encoder.frames_per_cell} per cell` : ""}), ${which}.`;
    addPlot(body, encoderFigure(res, map, which), "plot speech-encoder");
  } else {
    note.textContent = `Causal self-attention of the decoder over its tokens (the prompt, then the transcript), ${which}.`;
    addPlot(body, decoderFigure(res, map, which), "plot speech-decoder");
  }
  drawSpeechGrid(res, numLayers, numHeads);
}

function drawTranscript(res) {
  head.replaceChildren();
  const line = document.createElement("p");
  line.className = "transcript";
  const first = res.first_text_row;
  res.next_tokens.slice(first).forEach((token, i) => {
    const chip = document.createElement("span");
    chip.className = "token-chip";
    chip.textContent = token;
    chip.dataset.row = String(i);
    chip.title = "Click to mark this token's row and where it looks in the audio";
    if (media.token === i) chip.classList.add("selected");
    chip.addEventListener("click", () => {
      media.token = media.token === i ? null : i;
      drawSpeech();
    });
    line.append(chip);
  });
  head.append(line);
}

function frameTimes(count, perCell, frameS) {
  return range(count).map((i) => (i + 0.5) * perCell * frameS);
}

function crossFigure(res, map, which) {
  const rows = map.slice(res.first_text_row);
  const labels = res.next_tokens.slice(res.first_text_row);
  const times = frameTimes(res.num_frames, 1, res.frame_s);
  const scaled = scaledWeights(rows, "row");
  const wave = res.waveform;
  const waveTimes = range(wave.max.length).map((i) => (i + 0.5) * wave.step_s);
  const traces = [
    { type: "scatter", mode: "lines", x: waveTimes, y: wave.max, yaxis: "y2", line: { width: 0.5, color: "#64748b" }, hoverinfo: "skip", showlegend: false },
    { type: "scatter", mode: "lines", x: waveTimes, y: wave.min, yaxis: "y2", fill: "tonexty", fillcolor: "rgba(100,116,139,0.45)", line: { width: 0.5, color: "#64748b" }, hoverinfo: "skip", showlegend: false },
    {
      type: "heatmap", x: times, y: range(rows.length), z: scaled, customdata: rows,
      colorscale: WEIGHT_COLORSCALE, zmin: 0, zmax: 1, showscale: true,
      colorbar: { title: { text: "÷ row max" }, len: 0.7, y: 0.37 },
      text: rows.map((row, i) => row.map(() => escapeForPlotly(labels[i]))),
      hovertemplate: "%{text}<br>t = %{x:.2f} s<br>weight %{customdata:.4f}<extra></extra>",
    },
  ];
  const shapes = [];
  if (media.token !== null && media.token < rows.length) {
    const row = rows[media.token];
    const peak = row.indexOf(Math.max(...row));
    shapes.push({ type: "rect", xref: "paper", yref: "y", x0: 0, x1: 1, y0: media.token - 0.5, y1: media.token + 0.5, line: { color: "#f59e0b", width: 2 } });
    shapes.push({ type: "line", xref: "x", yref: "paper", x0: times[peak], x1: times[peak], y0: 0, y1: 1, line: { color: "#f59e0b", width: 2, dash: "dot" } });
  }
  return {
    traces,
    layout: {
      title: { text: `Cross attention over time: ${escapeForPlotly(which)}` },
      xaxis: { title: { text: "time (s)" }, range: [0, res.duration_s], anchor: "y" },
      yaxis: {
        domain: [0, 0.74], autorange: "reversed", tickvals: range(rows.length),
        ticktext: labels.map((t) => escapeForPlotly(t)), title: { text: "transcribed token" },
      },
      yaxis2: { domain: [0.8, 1], range: [-1, 1], showticklabels: false, zeroline: false, title: { text: "audio" } },
      margin: { l: 110, r: 40, t: 50, b: 50 },
      shapes,
    },
  };
}

function encoderFigure(res, map, which) {
  const perCell = res.blocks.encoder.frames_per_cell;
  const times = frameTimes(map.length, perCell, res.frame_s);
  return {
    traces: [{
      type: "heatmap", x: times, y: times, z: map, colorscale: WEIGHT_COLORSCALE, zmin: 0,
      hovertemplate: "query %{y:.2f} s<br>key %{x:.2f} s<br>weight %{z:.4f}<extra></extra>",
    }],
    layout: {
      title: { text: `Encoder self-attention: ${escapeForPlotly(which)}` },
      xaxis: { title: { text: "key frame time (s)" } },
      yaxis: { title: { text: "query frame time (s)" }, autorange: "reversed", scaleanchor: "x" },
      margin: { l: 70, r: 40, t: 50, b: 50 },
    },
  };
}

function decoderFigure(res, map, which) {
  const labels = res.decoder_tokens.map((t) => escapeForPlotly(t));
  const n = labels.length;
  return {
    traces: [{
      type: "heatmap", x: range(n), y: range(n), z: map, colorscale: WEIGHT_COLORSCALE, zmin: 0, zmax: 1,
      text: map.map((row, i) => row.map((_, j) => `${labels[i]} → ${labels[j]}`)),
      hovertemplate: "%{text}<br>weight %{z:.4f}<extra></extra>",
    }],
    layout: {
      title: { text: `Decoder self-attention: ${escapeForPlotly(which)}` },
      xaxis: { tickvals: range(n), ticktext: labels, title: { text: "key token" } },
      yaxis: { tickvals: range(n), ticktext: labels, autorange: "reversed", title: { text: "query token" } },
      margin: { l: 150, r: 40, t: 50, b: 130 },
    },
  };
}

function drawSpeechGrid(res, numLayers, numHeads) {
  const block = speechView.block;
  for (let l = 0; l < numLayers; l += 1) {
    for (let h = 0; h < numHeads; h += 1) {
      let map = res.blocks[block].weights[l][h];
      if (block === "cross") map = map.slice(res.first_text_row);
      const alignment = block === "cross" && isAlignment(res, l, h);
      const div = addPlot(grid, {
        traces: [{
          type: "heatmap", z: block === "cross" ? scaledWeights(map, "row") : map,
          colorscale: WEIGHT_COLORSCALE, zmin: 0, showscale: false, hoverinfo: "skip",
        }],
        layout: {
          title: { text: `L${l} H${h}${alignment ? " ★" : ""}`, font: { size: 11 } },
          xaxis: { visible: false }, yaxis: { visible: false, autorange: "reversed" },
          margin: SMALL,
        },
      }, "plot speech-thumb");
      div.dataset.layer = String(l);
      div.dataset.head = String(h);
      if (alignment) div.classList.add("alignment");
      if (speechView.layer === String(l) && speechView.head === String(h)) div.classList.add("chosen");
      div.title = `Layer ${l}, head ${h}${alignment ? ": an alignment head" : ""}; click to draw it`;
      div.addEventListener("click", () => {
        speechView.layer = String(l);
        speechView.head = String(h);
        drawSpeech();
      });
    }
  }
}

// ---------------------------------------------------------------------------
// Images.

const visionView = { layer: null, show: MEAN };

function patchValues(res, row) {
  const [rows, cols] = res.grid;
  const prefix = res.prefix.length;
  return range(rows).map((r) => range(cols).map((c) => row[prefix + r * cols + c]));
}

function visionRow(res, layer, show) {
  if (show === ROLLOUT) return res.rollout[layer];
  const heads = res.weights[layer];
  if (show === MEAN) return heads[0].map((_, k) => heads.reduce((s, h) => s + h[k], 0) / heads.length);
  return heads[Number(show)];
}

function drawVision() {
  const res = media.vision;
  if (visionView.layer === null || visionView.layer >= res.num_layers) visionView.layer = res.num_layers - 1;
  if (![MEAN, ROLLOUT].includes(visionView.show) && Number(visionView.show) >= res.num_heads) {
    visionView.show = MEAN;
  }
  controls.replaceChildren();
  select("vision-layer", "Layer", range(res.num_layers).map((l) => [String(l), `layer ${l}`]),
    visionView.layer, (v) => { visionView.layer = Number(v); drawVision(); });
  select("vision-show", "Show", [[MEAN, "mean of heads"], ...range(res.num_heads).map((h) => [String(h), `head ${h}`]),
    [ROLLOUT, "rollout (layers 0 to this one)"]], visionView.show, (v) => { visionView.show = v; drawVision(); });
  if (res.query !== 0) {
    const back = document.createElement("button");
    back.type = "button";
    back.className = "secondary";
    back.id = "vision-cls";
    back.textContent = `Back to ${res.prefix[0]}`;
    back.addEventListener("click", () => { media.query = 0; media.submit(); });
    controls.append(back);
  }
  head.replaceChildren();
  const row = visionRow(res, visionView.layer, visionView.show);
  const prefixText = res.prefix.map((name, i) => `${name} ${row[i].toFixed(3)}`).join(" · ");
  const info = document.createElement("p");
  info.className = "media-labels";
  info.textContent = `Attention of ${res.query_name}; to the tokens that are not patches: ${prefixText}.`;
  const picture = document.createElement("img");
  picture.className = "media-picture";
  picture.src = res.image;
  picture.alt = "The image as the model saw it";
  picture.title = `The image as the model saw it (${res.width} × ${res.height} px), without the overlay`;
  head.append(picture, info);
  if (res.labels.length) {
    const labels = document.createElement("p");
    labels.className = "media-labels";
    labels.textContent = `Predicted: ${res.labels.map((l) => `${l.label} ${(100 * l.probability).toFixed(1)}%`).join(" · ")}`;
    head.append(labels);
  }
  note.textContent = "The image as the model saw it (its processor's resize and crop), under the " +
    `chosen token's attention over the ${res.grid[0]} × ${res.grid[1]} patches (transparent: ` +
    "the least, dark red: the most, scaled from the smallest patch's weight to the largest). Click a patch to see where it looks; " +
    "the thumbnails are the layer's heads, click one to draw it. Rollout multiplies the layers' " +
    "head means with the residual (Abnar & Zuidema 2020).";
  clearPlots(body);
  clearPlots(grid);
  const which = visionView.show === ROLLOUT ? `rollout through layer ${visionView.layer}`
    : `layer ${visionView.layer}, ${visionView.show === MEAN ? "mean of heads" : `head ${visionView.show}`}`;
  const main = addPlot(body, overlayFigure(res, row, `${res.query_name}: ${which}`, true), "plot overlay");
  main.drawn.then(() => {
    main.on("plotly_click", (event) => {
      const point = event.points && event.points.find((p) => p.data.type === "heatmap");
      if (!point) return;
      const [r, c] = point.pointIndex;
      media.query = res.prefix.length + r * res.grid[1] + c;
      media.submit();
    });
  });
  const shows = [...range(res.num_heads).map(String), MEAN, ROLLOUT];
  for (const show of shows) {
    const label = show === MEAN ? "mean" : (show === ROLLOUT ? "rollout" : `H${show}`);
    const div = addPlot(grid, overlayFigure(res, visionRow(res, visionView.layer, show), label, false), "plot vision-thumb");
    div.dataset.show = show;
    if (show === visionView.show) div.classList.add("chosen");
    div.addEventListener("click", () => { visionView.show = show; drawVision(); });
  }
}

function overlayFigure(res, row, title, large) {
  const [rows, cols] = res.grid;
  const values = patchValues(res, row);
  const flat = values.flat();
  const top = Math.max(...flat);
  const bottom = Math.min(...flat);
  const shapes = [];
  if (res.query >= res.prefix.length) {
    const [r, c] = [Math.floor((res.query - res.prefix.length) / cols), (res.query - res.prefix.length) % cols];
    shapes.push({ type: "rect", x0: c - 0.5, x1: c + 0.5, y0: r - 0.5, y1: r + 0.5, line: { color: "#2563eb", width: large ? 3 : 1.5 } });
  }
  return {
    traces: [{
      type: "heatmap", z: values, x: range(cols), y: range(rows), zmin: bottom,
      zmax: top > bottom ? top : bottom + 1e-9,
      colorscale: OVERLAY_COLORSCALE, showscale: large, xgap: 0, ygap: 0,
      colorbar: large ? { title: { text: "weight" } } : undefined,
      hovertemplate: large ? "patch (row %{y}, column %{x})<br>weight %{z:.4f}<extra></extra>" : undefined,
      hoverinfo: large ? undefined : "skip",
    }],
    layout: {
      title: { text: escapeForPlotly(title), font: { size: large ? 14 : 11 } },
      images: [{
        source: res.image, xref: "x", yref: "y", x: -0.5, y: -0.5, sizex: cols, sizey: rows,
        sizing: "stretch", layer: "below", xanchor: "left", yanchor: "top",
      }],
      xaxis: { range: [-0.5, cols - 0.5], visible: large, dtick: cols > 16 ? 2 : 1, showgrid: false, zeroline: false, title: large ? { text: "patch column" } : undefined },
      yaxis: { range: [rows - 0.5, -0.5], visible: large, dtick: rows > 16 ? 2 : 1, showgrid: false, zeroline: false, scaleanchor: "x", title: large ? { text: "patch row" } : undefined },
      margin: large ? { l: 60, r: 20, t: 50, b: 50 } : SMALL,
      shapes,
    },
  };
}

window.attnvizMedia = media;
