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
import { shapeOf } from "../lib/arrays.js";
import { displayToken } from "../lib/display.js";
import { range } from "./common.js";
import { media, mediaDom, player } from "../models/state.js";

const CURSOR_COLOR = "#dc2626";
const MEDIAN_WIDTH = 7; // frames: Whisper's median filter before the alignment (timing.py)

export function loadClip(clip, res) {
  pause();
  player.blob = clip.blob;
  player.buffer = null;
  player.duration = res.duration_s;
  player.spans = tokenSpans(res);
  player.offset = 0;
  player.spanToken = null;
}

export function unloadClip() {
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
export function pause() {
  cancelAnimationFrame(player.frame);
  if (!player.source) return;
  const source = player.source;
  player.offset = player.currentTime;
  player.source = null;
  source.stop();
  showPosition();
}

export function playSpan(token) {
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
export function playerBar() {
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
export function cursorTime() {
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
export function cursorShapes(block, t) {
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
export function showPosition() {
  const { head } = mediaDom;
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
  const { body } = mediaDom;
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
  const rows = shapeOf(cross)[2] - first; // the transcribed tokens
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
