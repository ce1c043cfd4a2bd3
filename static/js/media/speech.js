// The speech view: a Whisper model's transcript, each transcribed token's cross attention
// over the audio under the waveform (time in seconds), the encoder's self-attention over
// frames and the decoder's over tokens, and every layer's and head's map as thumbnails.
import {
  WEIGHT_COLORSCALE, addPlot, clearPlots, escapeForPlotly, scaledWeights,
} from "../heatmap.js";
import { shapeOf } from "../lib/arrays.js";
import { displayToken } from "../lib/display.js";
import { ALIGNMENT, MEAN, SMALL, range, select } from "./common.js";
import { cursorShapes, cursorTime, playSpan, playerBar, showPosition } from "./playback.js";
import { media, mediaDom, player, speechView } from "../models/state.js";

const TITLE_PX = 14; // the speech figures' title font size
const MARK_COLOR = "#f59e0b"; // the selected token's row, peak and span

function meanOf(maps) {
  const [, rows, cols] = shapeOf(maps);
  const out = range(rows).map(() => new Array(cols).fill(0));
  for (const map of maps) {
    for (let i = 0; i < rows; i += 1) {
      for (let j = 0; j < cols; j += 1) out[i][j] += map[i][j] / maps.length;
    }
  }
  return out;
}

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

export function drawSpeech() {
  const { controls, grid } = mediaDom;
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
  select(controls, "speech-block", "Block", [
    ["cross", "cross: each token over the audio"],
    ["encoder", "encoder: audio frames over frames"],
    ["decoder", "decoder: tokens over tokens"],
  ], speechView.block, (v) => { speechView.block = v; drawSpeech(); });
  const layers = range(numLayers).map((l) => [String(l), `layer ${l}`]);
  if (speechView.block === "cross" && aligned) layers.unshift([ALIGNMENT, "alignment heads (mean)"]);
  select(controls, "speech-layer", "Layer", layers, speechView.layer, (v) => {
    speechView.layer = v;
    drawSpeech();
  });
  const headSelect = select(controls, "speech-head", "Head", [[MEAN, "mean of heads"],
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
  const { note, body } = mediaDom;
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
  const { view, head } = mediaDom;
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
  const { head } = mediaDom;
  media.token = row;
  for (const chip of head.querySelectorAll(".transcript .token-chip")) {
    chip.classList.toggle("selected", Number(chip.dataset.row) === row);
  }
  if (speechView.block === "cross") drawSpeechMap(media.speech);
}

// Esc clears the marked token.
export function bindSpeech() {
  const { speechControl } = mediaDom;
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && media.token !== null && media.speech && !speechControl.hidden) {
      markToken(null);
    }
  });
}

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
  const { body } = mediaDom;
  return { text: wrapTitle(text, Math.max(120, body.clientWidth - margin.l - 8)), font: { size: TITLE_PX } };
}

// Below this width (px) the speech view is a phone's: the colour bar goes under the map.
const NARROW_PX = 560;

function crossFigure(res, map, which) {
  const { body } = mediaDom;
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
  const { grid } = mediaDom;
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
