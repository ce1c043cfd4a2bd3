// AttnViz on /models for speech and images: a Whisper model transcribes an uploaded or
// recorded clip and shows each transcribed token's cross attention over the audio, under
// the waveform, with time in seconds (and the encoder's self-attention over frames, the
// decoder's over tokens); the clip plays in the page, a cursor crossing the waveform and
// the maps as the transcript's tokens light up in turn. A vision transformer shows one
// token's attention (the [CLS] token, or a clicked patch) as an overlay on the image, per
// layer and head, with rollout.
//
// This module is what models.js uses: the inputs (a file, a recording, the sample), the
// requests, and the views' switch; the views are under media/ (speech.js, its playback in
// playback.js, vision.js), their state in models/state.js, their elements handed in.
import { jsonFetcher } from "./api.js";
import { clearPlots } from "./heatmap.js";
import { loadClip, pause, unloadClip } from "./media/playback.js";
import { bindSpeech, drawSpeech } from "./media/speech.js";
import { drawVision } from "./media/vision.js";
import { media, mediaDom, player } from "./models/state.js";

const SPEECH_URL = "/api/v1/speech";
const VISION_URL = "/api/v1/vision";
const SAMPLE_URL = "/static/samples/the-cat-sat.flac";
const MAX_RECORD_MS = 29500; // within Whisper's 30 s window, with the recorder's latency

// "speech" or "image" for a model that reads them, null for a text model.
export function mediaModality(model) {
  const modality = model && model.modality;
  return modality === "speech" || modality === "image" ? modality : null;
}

// Show the chosen model's inputs and views: the text ones, or the speech or image ones.
export function showMediaInputs(model) {
  const {
    modelForm, results, speechControl, imageControl, head, controls, note, body, grid,
  } = mediaDom;
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
// `elements`: the inputs' and the views' elements (models/elements.js mediaElements).
export function bindMedia(elements, submit) {
  Object.assign(mediaDom, elements);
  const { audioFile, imageFile, recordButton, sampleButton, audioStatus, imageStatus } = elements;
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
  bindSpeech();
}

async function toggleRecording() {
  const { recordButton, audioStatus } = mediaDom;
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

window.attnvizMedia = media;
