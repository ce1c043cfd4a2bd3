// AttnViz on /models for speech and images: a Whisper model transcribes an uploaded or
// recorded clip and shows each transcribed token's cross attention over the audio, under
// the waveform, with time in seconds (and the encoder's self-attention over frames, the
// decoder's over tokens); the clip plays in the page, a cursor crossing the waveform and
// the maps as the transcript's tokens light up in turn. A vision transformer shows one
// token's attention (the [CLS] token, or a clicked patch) as an overlay on the image, per
// layer and head, with rollout.
import { jsonFetcher, option } from "./api.js";
import {
  WEIGHT_COLORSCALE, addPlot, clearPlots, escapeForPlotly, scaledWeights,
} from "./heatmap.js";
import { displayToken } from "./lib/display.js";

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
const TITLE_PX = 14; // the speech figures' title font size
const CURSOR_COLOR = "#dc2626";
const MARK_COLOR = "#f59e0b"; // the selected token's row, peak and span
const MEDIAN_WIDTH = 7; // frames: Whisper's median filter before the alignment (timing.py)

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
  if (modality !== "speech") pause();
  if (modality === null) return;
  const shown = modality === "speech" ? media.speech : media.vision;
  if (!shown || shown.model !== model.name) {
    if (modality === "speech") unloadClip();
    clearPlots(body);
    clearPlots(grid);
    head.replaceChildren();
    if (player.bar) player.bar.hidden = true;
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
    const clip = media.audio; // the one heard, even if another is chosen meanwhile
    const res = await post(SPEECH_URL, { audio: clip, model: model.name, device });
    media.speech = res;
    media.token = null;
    loadClip(clip, res);
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
  drawSpeechMap(res);
  drawTranscript(res); // after the map: it moves the map's cursor
  clearPlots(grid);
  drawSpeechGrid(res, numLayers, numHeads);
}

// The enlarged map of the chosen block, layer and head, and its note.
function drawSpeechMap(res) {
  clearPlots(body);
  const map = speechMap(res, speechView.block, speechView.layer, speechView.head);
  const which = speechView.layer === ALIGNMENT
    ? `the mean of the ${res.alignment_heads.length} alignment heads`
    : `layer ${speechView.layer}, ${speechView.head === MEAN ? "mean of heads" : `head ${speechView.head}`}`;
  if (speechView.block === "cross") {
    note.textContent = `Each row is a transcribed token; its cells are the attention over the audio ` +
      `(20 ms frames) of the decoder position that produced it, ${which}. Colours are scaled ` +
      `per row (the darkest: the row's largest weight; hover for the weight). Frames past the ` +
      `audio (Whisper pads to 30 s) are not drawn. Outlined thumbnails are the alignment heads ` +
      `the model's config names; click one to draw it. Play draws a red cursor over the ` +
      `audio and lights up each token in its span; click a token to hear its span (shaded ` +
      `over the waveform; Esc clears the mark).`;
    addPlot(body, crossFigure(res, map, which), "plot speech-cross");
  } else if (speechView.block === "encoder") {
    note.textContent = `Self-attention of the encoder over the audio's frames (20 ms each` +
      `${res.blocks.encoder.frames_per_cell > 1 ? `, ${res.blocks.encoder.frames_per_cell} per cell` : ""}), ${which}.` +
      " While the audio plays, red lines mark the frame being heard: its column (who looks " +
      "at it) and its row (where it looks).";
    addPlot(body, encoderFigure(res, map, which), "plot speech-encoder");
  } else {
    note.textContent = `Causal self-attention of the decoder over its tokens (the prompt, then the transcript), ${which}.`;
    addPlot(body, decoderFigure(res, map, which), "plot speech-decoder");
  }
}

function drawTranscript(res) {
  head.replaceChildren();
  const line = document.createElement("p");
  line.className = "transcript";
  const first = res.first_text_row;
  res.next_tokens.slice(first).forEach((token, i) => {
    const chip = document.createElement("span");
    chip.className = "token-chip";
    chip.textContent = displayToken(token);
    chip.dataset.row = String(i);
    const [start, end] = player.spans[i] || [0, 0];
    chip.dataset.start = String(start);
    chip.dataset.end = String(end);
    chip.title = `${start.toFixed(2)}–${end.toFixed(2)} s. Click to hear it and to mark its ` +
      "row and where it looks in the audio";
    chip.setAttribute("role", "button");
    chip.tabIndex = 0;
    if (media.token === i) chip.classList.add("selected");
    chip.addEventListener("click", () => {
      markToken(i);
      playSpan(i);
    });
    chip.addEventListener("keydown", (event) => {
      if (event.key !== "Enter" && event.key !== " ") return;
      event.preventDefault();
      chip.click();
    });
    line.append(chip);
  });
  head.append(line);
  const bar = playerBar();
  bar.hidden = false;
  if (!bar.isConnected) view.insertBefore(bar, head);
  showPosition();
}

// Mark token `row` (or none): its chip, its row, peak and span in the cross map.
function markToken(row) {
  media.token = row;
  for (const chip of head.querySelectorAll(".transcript .token-chip")) {
    chip.classList.toggle("selected", Number(chip.dataset.row) === row);
  }
  if (speechView.block === "cross") drawSpeechMap(media.speech);
}

document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && media.token !== null && media.speech && !speechControl.hidden) {
    markToken(null);
  }
});

function frameTimes(count, perCell, frameS) {
  return range(count).map((i) => (i + 0.5) * perCell * frameS);
}

// Title `text` broken into lines (<br>) that fit `width` px at TITLE_PX: Plotly does not
// wrap titles, and a phone's figure is narrower than one line of it.
function wrapTitle(text, width) {
  const context = document.createElement("canvas").getContext("2d");
  context.font = `${TITLE_PX}px "Open Sans", verdana, arial, sans-serif`; // Plotly's font
  const lines = [];
  let line = "";
  for (const word of text.split(" ")) {
    const longer = line ? `${line} ${word}` : word;
    if (line && context.measureText(longer).width > width) {
      lines.push(line);
      line = word;
    } else {
      line = longer;
    }
  }
  lines.push(line);
  return lines.map(escapeForPlotly).join("<br>");
}

// A speech figure's title: at the top left of its plot area (heatmap.js placeTitle), so
// it has the figure's width less the left margin.
function speechTitle(text, margin) {
  return { text: wrapTitle(text, Math.max(120, body.clientWidth - margin.l - 8)), font: { size: TITLE_PX } };
}

// Below this width (px) the speech view is a phone's: the colour bar goes under the map.
const NARROW_PX = 560;

function crossFigure(res, map, which) {
  const narrow = body.clientWidth < NARROW_PX;
  const margin = narrow ? { l: 110, r: 12, t: 50, b: 100 } : { l: 110, r: 40, t: 50, b: 50 };
  const rows = map.slice(res.first_text_row);
  const labels = res.next_tokens.slice(res.first_text_row).map(displayToken);
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
      // Beside the map; on a phone under it, where beside it would halve the time axis.
      colorbar: narrow ? {
        title: { text: "÷ row max", side: "right" }, orientation: "h", thickness: 10, len: 1,
        x: 0, xanchor: "left", yref: "container", y: 0, yanchor: "bottom",
      } : { title: { text: "÷ row max" }, len: 0.7, y: 0.37 },
      text: rows.map((row, i) => row.map(() => escapeForPlotly(labels[i]))),
      hovertemplate: "%{text}<br>t = %{x:.2f} s<br>weight %{customdata:.4f}<extra></extra>",
    },
  ];
  // The cursor first (cursorShapes), then the selected token's marks.
  const shapes = cursorShapes("cross", cursorTime());
  if (media.token !== null && media.token < rows.length) {
    const row = rows[media.token];
    const peak = row.indexOf(Math.max(...row));
    const [start, end] = player.spans[media.token] || [0, 0];
    shapes.push({
      name: "token-row", type: "rect", xref: "paper", yref: "y", x0: 0, x1: 1,
      y0: media.token - 0.5, y1: media.token + 0.5, line: { color: MARK_COLOR, width: 2 },
    });
    shapes.push({
      name: "token-peak", type: "line", xref: "x", yref: "paper", x0: times[peak], x1: times[peak],
      y0: 0, y1: 1, line: { color: MARK_COLOR, width: 2, dash: "dot" },
    });
    // The span it plays, shaded over the waveform (yaxis2's domain).
    shapes.push({
      name: "token-span", type: "rect", xref: "x", yref: "paper", x0: start, x1: end, y0: 0.8,
      y1: 1, layer: "below", fillcolor: "rgba(245,158,11,0.3)", line: { width: 0 },
    });
  }
  return {
    traces,
    layout: {
      title: speechTitle(`Cross attention over time: ${which}`, margin),
      xaxis: { title: { text: "time (s)" }, range: [0, res.duration_s], anchor: "y" },
      yaxis: {
        domain: [0, 0.74], autorange: "reversed", tickvals: range(rows.length),
        ticktext: labels.map((t) => escapeForPlotly(t)), title: { text: "transcribed token" },
      },
      yaxis2: { domain: [0.8, 1], range: [-1, 1], showticklabels: false, zeroline: false, title: { text: "audio" } },
      margin,
      shapes,
    },
  };
}

function encoderFigure(res, map, which) {
  const perCell = res.blocks.encoder.frames_per_cell;
  const times = frameTimes(map.length, perCell, res.frame_s);
  const margin = { l: 70, r: 40, t: 50, b: 50 };
  // Both axes span the audio exactly; square cells shrink the plot area (constrain:
  // domain) rather than widen the time range past the audio.
  return {
    traces: [{
      type: "heatmap", x: times, y: times, z: map, colorscale: WEIGHT_COLORSCALE, zmin: 0,
      hovertemplate: "query %{y:.2f} s<br>key %{x:.2f} s<br>weight %{z:.4f}<extra></extra>",
    }],
    layout: {
      title: speechTitle(`Encoder self-attention: ${which}`, margin),
      xaxis: {
        title: { text: "key frame time (s)" }, range: [0, res.duration_s], constrain: "domain",
        constraintoward: "left",
      },
      yaxis: {
        title: { text: "query frame time (s)" }, range: [res.duration_s, 0], scaleanchor: "x",
        constrain: "domain", constraintoward: "top",
      },
      margin,
      shapes: cursorShapes("encoder", cursorTime()),
    },
  };
}

function decoderFigure(res, map, which) {
  const labels = res.decoder_tokens.map((t) => escapeForPlotly(displayToken(t)));
  const n = labels.length;
  const margin = { l: 150, r: 40, t: 50, b: 130 };
  return {
    traces: [{
      type: "heatmap", x: range(n), y: range(n), z: map, colorscale: WEIGHT_COLORSCALE, zmin: 0, zmax: 1,
      text: map.map((row, i) => row.map((_, j) => `${labels[i]} → ${labels[j]}`)),
      hovertemplate: "%{text}<br>weight %{z:.4f}<extra></extra>",
    }],
    layout: {
      title: speechTitle(`Decoder self-attention: ${which}`, margin),
      xaxis: { tickvals: range(n), ticktext: labels, title: { text: "key token" } },
      yaxis: { tickvals: range(n), ticktext: labels, autorange: "reversed", title: { text: "query token" } },
      margin,
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
// Speech playback. The clip the user gave (media.speech's, kept as its Blob) plays in the
// page through the Web Audio API, from its decoded samples: the page's Content-Security-
// Policy lets media come from this server only (media-src falls back to default-src
// 'self'), so an <audio> element may not play an object URL of an upload or a recording.
//
// A token's span is where Whisper's word timestamps put it (openai/whisper, timing.py,
// find_alignment): the cross attention of the alignment heads (without any in the config:
// every head of the second half of the layers, Whisper's default), each token's row over
// the audio renormalised to sum to 1 (the softmax Whisper takes over the audio's frames),
// standardised over the tokens at each frame, median-filtered over MEDIAN_WIDTH frames and
// averaged over the heads; dynamic time warping on its negative is a monotonic path from
// the first token at the first frame to the last at the last. Token k spans from the frame
// where the path enters its row to the one where it enters row k + 1 (the last token: to
// the end of the audio). So the spans tile the audio in order, and every instant belongs
// to one token: the one lit up as the cursor passes.

const player = {
  context: null, // the AudioContext, made on the first play (a click: the autoplay policy)
  blob: null, // the clip heard
  buffer: null, // a promise of its decoded samples (AudioBuffer), made on the first play
  duration: 0, // s, the server's length of the clip (the maps' time axes)
  spans: [], // [start, end] (s) of each transcribed token, tokenSpans
  source: null, // the AudioBufferSourceNode playing, or null
  offset: 0, // s: where the source started; the position while paused
  startedAt: 0, // context.currentTime when the source started
  stopAt: 0, // s: where the source stops (the clip's end, or a token span's)
  spanToken: null, // the token whose span is playing or was just played, or null
  frame: 0, // requestAnimationFrame id while playing
  bar: null, // the controls (playerBar)
  get playing() { return this.source !== null; },
  // The position in the clip (s).
  get currentTime() {
    if (!this.source) return this.offset;
    return Math.min(this.stopAt, this.offset + this.context.currentTime - this.startedAt);
  },
};
media.player = player;

function loadClip(clip, res) {
  pause();
  player.blob = clip.blob;
  player.buffer = null;
  player.duration = res.duration_s;
  player.spans = tokenSpans(res);
  player.offset = 0;
  player.spanToken = null;
}

function unloadClip() {
  pause();
  player.blob = null;
  player.buffer = null;
  player.spans = [];
  player.offset = 0;
}

function decodedClip() {
  if (!player.buffer) {
    const blob = player.blob;
    player.buffer = blob.arrayBuffer().then((bytes) => player.context.decodeAudioData(bytes));
  }
  return player.buffer;
}

// Play the clip from `from` to `to` (s); `token`: the token whose span this is, or null.
async function play(from, to, token = null) {
  pause();
  if (!player.blob) return;
  if (!player.context) player.context = new AudioContext();
  const blob = player.blob;
  let buffer;
  try {
    [buffer] = await Promise.all([decodedClip(), player.context.resume()]);
  } catch (error) {
    playerStatus(`This browser cannot play this clip: ${error.message}`);
    return;
  }
  if (player.blob !== blob) return; // another clip came meanwhile
  pause(); // a second click while this one decoded
  const end = Math.min(to, buffer.duration);
  const start = Math.min(Math.max(0, from), end);
  const source = player.context.createBufferSource();
  source.buffer = buffer;
  source.connect(player.context.destination);
  source.addEventListener("ended", () => {
    if (player.source !== source) return; // paused, or replaced
    player.source = null;
    // The whole clip played: back to the start (the cursor goes); a span: stay at its end.
    player.offset = token === null && end >= buffer.duration - 1e-3 ? 0 : end;
    cancelAnimationFrame(player.frame);
    showPosition();
  });
  source.start(0, start, end - start);
  Object.assign(player, {
    source, offset: start, startedAt: player.context.currentTime, stopAt: end, spanToken: token,
  });
  showPosition();
  tick();
}

function tick() {
  showPosition();
  if (player.playing) player.frame = requestAnimationFrame(tick);
}

// Stop where it is (the position kept).
function pause() {
  cancelAnimationFrame(player.frame);
  if (!player.source) return;
  const source = player.source;
  player.offset = player.currentTime;
  player.source = null;
  source.stop();
  showPosition();
}

function playSpan(token) {
  const [start, end] = player.spans[token];
  play(start, Math.max(end, start + media.speech.frame_s), token);
}

function togglePlay() {
  if (player.playing) {
    pause();
    return;
  }
  const from = player.offset >= player.duration - 1e-3 ? 0 : player.offset;
  play(from, Infinity);
}

// The controls above the transcript: play/pause, a position slider, the time. Made once,
// so that redrawing the view keeps them (and their focus); they stay at the top of the
// screen while the view scrolls under them (a phone's map is a screen below them).
function playerBar() {
  if (player.bar) return player.bar;
  const bar = document.createElement("div");
  bar.className = "speech-player";
  bar.setAttribute("role", "group");
  bar.setAttribute("aria-label", "Play the audio");
  const button = document.createElement("button");
  button.type = "button";
  button.id = "speech-play";
  button.className = "secondary";
  button.addEventListener("click", togglePlay);
  const seek = document.createElement("input");
  seek.type = "range";
  seek.id = "speech-seek";
  seek.min = "0";
  seek.step = "0.01";
  seek.value = "0";
  seek.setAttribute("aria-label", "Position in the audio (s)");
  seek.addEventListener("input", () => {
    const at = Number(seek.value);
    if (player.playing) {
      play(at, Infinity);
    } else {
      player.offset = at;
      player.spanToken = null;
      showPosition();
    }
  });
  const clock = document.createElement("span");
  clock.className = "speech-clock";
  const heard = document.createElement("span"); // the token heard, for a phone scrolled down
  heard.className = "speech-heard";
  const status = document.createElement("span");
  status.className = "hint speech-player-status";
  status.setAttribute("role", "status");
  bar.append(button, seek, clock, heard, status);
  player.bar = bar;
  return bar;
}

function playerStatus(text) {
  playerBar().querySelector(".speech-player-status").textContent = text;
}

// Where the cursor is (s), or null where there is none: stopped at the start.
function cursorTime() {
  return player.playing || player.offset > 0 ? player.currentTime : null;
}

// The transcribed token heard at `t` (s): the span just played while the cursor is in it,
// else the one whose span holds t.
function tokenAt(t) {
  const spans = player.spans;
  if (t === null || !spans.length) return null;
  const played = spans[player.spanToken];
  if (played && t >= played[0] && t <= played[1] + 1e-3) return player.spanToken;
  const k = spans.findIndex(([start, end]) => t >= start && t < end);
  return k >= 0 ? k : spans.length - 1;
}

// The cursor's shapes in a figure of `block` at `t` (s; null: hidden): a vertical line over
// the waveform and the time axis; over the encoder's map (square, within the audio's time
// on both axes) the column and the row of the frame heard.
function cursorShapes(block, t) {
  if (block === "decoder") return [];
  const at = t ?? 0;
  const line = { color: CURSOR_COLOR, width: 2 };
  const visible = t !== null;
  if (block === "cross") {
    return [{
      name: "cursor", type: "line", xref: "x", yref: "paper", x0: at, x1: at, y0: 0, y1: 1,
      line, visible,
    }];
  }
  const end = player.duration;
  return [
    { name: "cursor", type: "line", xref: "x", yref: "y", x0: at, x1: at, y0: 0, y1: end, line, visible },
    { name: "cursor-row", type: "line", xref: "x", yref: "y", x0: 0, x1: end, y0: at, y1: at, line, visible },
  ];
}

// Draw the position: the cursor in the map, the token heard, the slider and the time.
function showPosition() {
  if (!player.bar || !media.speech) return;
  const t = cursorTime();
  const now = player.currentTime;
  const button = player.bar.querySelector("#speech-play");
  button.textContent = player.playing ? "❚❚ Pause" : "▶ Play";
  button.setAttribute("aria-pressed", String(player.playing));
  const seek = player.bar.querySelector("#speech-seek");
  seek.max = String(player.duration);
  seek.value = String(now);
  player.bar.querySelector(".speech-clock").textContent =
    `${now.toFixed(2)} / ${player.duration.toFixed(2)} s`;
  const heard = tokenAt(t);
  const tokens = media.speech.next_tokens.slice(media.speech.first_text_row);
  player.bar.querySelector(".speech-heard").textContent = heard === null ? "" : displayToken(tokens[heard]);
  for (const chip of head.querySelectorAll(".transcript .token-chip")) {
    const on = Number(chip.dataset.row) === heard;
    chip.classList.toggle("playing", on);
    if (on) chip.setAttribute("aria-current", "true");
    else chip.removeAttribute("aria-current");
  }
  moveCursor(t);
}

// Move the cursor shapes of the drawn map (the first shapes of its layout, cursorShapes)
// to `t`; one relayout at a time, the latest position winning.
function moveCursor(t) {
  const div = body.querySelector(".speech-cross, .speech-encoder");
  if (!div || !div._fullLayout || !window.Plotly) return;
  div.cursorWanted = t;
  if (div.cursorBusy || div.cursorAt === t) return;
  const block = div.classList.contains("speech-encoder") ? "encoder" : "cross";
  const update = {};
  cursorShapes(block, t).forEach((shape, i) => {
    for (const key of ["x0", "x1", "y0", "y1", "visible"]) update[`shapes[${i}].${key}`] = shape[key];
  });
  div.cursorBusy = true;
  div.cursorAt = t;
  Plotly.relayout(div, update).finally(() => {
    div.cursorBusy = false;
    if (div.cursorWanted !== div.cursorAt) moveCursor(div.cursorWanted);
  });
}

// [start, end] (s) of each transcribed token (the spans described above). About 0.3 s for
// 30 s of audio and 224 tokens (the most Whisper writes) on a 2-core machine.
function tokenSpans(res) {
  const cross = res.blocks.cross.weights; // (N, H, T, F)
  const first = res.first_text_row;
  const heads = res.alignment_heads.length ? res.alignment_heads : range(cross.length)
    .slice(Math.floor(cross.length / 2)).flatMap((l) => range(cross[l].length).map((h) => [l, h]));
  const rows = cross[0][0].length - first; // the transcribed tokens
  const frames = res.num_frames;
  // 1) Each head's rows renormalised, standardised at each frame, filtered; their mean.
  const matrix = range(rows).map(() => new Float64Array(frames)); // (rows, F)
  const w = range(rows).map(() => new Float64Array(frames)); // one head's, (rows, F)
  const filtered = new Float64Array(frames);
  for (const [l, h] of heads) {
    for (let i = 0; i < rows; i += 1) {
      const row = cross[l][h][first + i];
      let total = 0;
      for (let j = 0; j < frames; j += 1) total += row[j];
      for (let j = 0; j < frames; j += 1) w[i][j] = row[j] / (total || 1);
    }
    for (let j = 0; j < frames; j += 1) {
      let mean = 0;
      for (let i = 0; i < rows; i += 1) mean += w[i][j];
      mean /= rows;
      let variance = 0;
      for (let i = 0; i < rows; i += 1) variance += (w[i][j] - mean) ** 2;
      const std = Math.sqrt(variance / rows) || 1;
      for (let i = 0; i < rows; i += 1) w[i][j] = (w[i][j] - mean) / std;
    }
    for (let i = 0; i < rows; i += 1) {
      medianFilter(w[i], MEDIAN_WIDTH, filtered);
      for (let j = 0; j < frames; j += 1) matrix[i][j] += filtered[j] / heads.length;
    }
  }
  // 2) The path of dynamic time warping through -matrix; 3) where it enters each row.
  const starts = rowEntries(matrix);
  return starts.map((j, k) => [
    j * res.frame_s, k + 1 < rows ? starts[k + 1] * res.frame_s : res.duration_s,
  ]);
}

// Each value of `row` replaced by the median of the `width` (odd) around it, the ends
// mirrored (torch's "reflect" padding, as Whisper's median_filter), into `out`.
function medianFilter(row, width, out) {
  const pad = Math.floor(width / 2);
  const n = row.length;
  if (n <= pad) {
    out.set(row);
    return;
  }
  const window = new Float64Array(width);
  for (let j = 0; j < n; j += 1) {
    for (let k = 0; k < width; k += 1) { // insertion sort: 7 values
      const at = j - pad + k;
      const v = row[at < 0 ? -at : (at >= n ? 2 * (n - 1) - at : at)];
      let q = k;
      while (q > 0 && window[q - 1] > v) {
        window[q] = window[q - 1];
        q -= 1;
      }
      window[q] = v;
    }
    out[j] = window[pad];
  }
}

// Dynamic time warping that maximises the sum of `matrix` (rows x frames) along a path from
// (0, 0) to the last cell, each step to the next frame, the next row or both (Whisper's
// dtw_cpu on the negative, its ties included); returns the first frame of the path in
// each row.
function rowEntries(matrix) {
  const n = matrix.length;
  const m = matrix[0].length;
  const cost = new Float64Array((n + 1) * (m + 1)).fill(Infinity); // (n + 1, m + 1)
  // 0: from the diagonal, 1: from the row above (same frame), 2: from the frame before.
  const trace = new Int8Array((n + 1) * (m + 1));
  const at = (i, j) => i * (m + 1) + j;
  cost[0] = 0;
  for (let j = 1; j <= m; j += 1) {
    for (let i = 1; i <= n; i += 1) {
      const c0 = cost[at(i - 1, j - 1)];
      const c1 = cost[at(i - 1, j)];
      const c2 = cost[at(i, j - 1)];
      let step = 2;
      if (c0 < c1 && c0 < c2) step = 0;
      else if (c1 < c0 && c1 < c2) step = 1;
      cost[at(i, j)] = (step === 0 ? c0 : (step === 1 ? c1 : c2)) - matrix[i - 1][j - 1];
      trace[at(i, j)] = step;
    }
  }
  const entries = new Array(n).fill(0);
  let [i, j] = [n, m];
  while (i > 0 && j > 0) {
    entries[i - 1] = j - 1; // the last visit going back: the first going forward
    const step = trace[at(i, j)];
    if (step !== 2) i -= 1;
    if (step !== 1) j -= 1;
  }
  return entries;
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
  if (player.bar) player.bar.hidden = true;
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
