// A vision-language model's image: chosen in the form (a file, a paste, the sample), sent
// with the prompt (`images` of POST /api/v1/models/attention, base64), and the attention of
// one query token over the image tokens drawn on the picture (per layer and head, or their
// means), each token's cell the rectangle of the original image it covers (the answer's
// `images`: attnviz.pretrained.image_tokens). Play steps through the generated tokens.
import { busy, shapeOf } from "../api.js";
import { addPlot, clearPlots, escapeForPlotly } from "../heatmap.js";
import { displayToken } from "../lib/display.js";
import { viewRequest } from "./form.js";
import { requestAttention } from "./listing.js";
import { selectedModel } from "./catalog.js";
import { page, promptImage, state } from "./state.js";

const SAMPLE_URL = "/static/samples/shapes.png";
const PLAY_STEP_MS = 700; // how long each generated token's overlay stays during Play
const MEAN = "mean";
// Transparent at 0, so the picture shows where a token gets no attention; the opacity
// control scales the whole overlay.
const COLORSCALE = [
  [0, "rgba(255,255,255,0)"], [0.25, "rgba(254,217,118,0.45)"], [0.5, "rgba(253,141,60,0.65)"],
  [0.75, "rgba(227,26,28,0.85)"], [1, "rgba(128,0,38,1)"],
];

const $ = (id) => document.getElementById(id);
const dom = {
  control: $("prompt-image-control"), file: $("prompt-image"), sample: $("prompt-image-sample"),
  clear: $("prompt-image-clear"), preview: $("prompt-image-preview"), status: $("prompt-image-status"),
  panel: $("image-attention"), query: $("image-query"), layer: $("image-layer"), head: $("image-head"),
  opacity: $("image-opacity"), scale: $("image-scale"), play: $("image-play"),
  note: $("image-attention-note"),
};
dom.plots = dom.panel.querySelector(".image-attention-plots");

// The drawn overlay: the answer it is of, the query, the play timer; for the tests.
const overlay = { res: null, query: null, timer: null, ticket: 0, base: null };
window.attnvizImage = overlay;

function setImage(dataUrl, name) {
  promptImage.dataUrl = dataUrl;
  promptImage.name = name;
  dom.preview.hidden = dataUrl === null;
  if (dataUrl !== null) dom.preview.src = dataUrl;
  else dom.preview.removeAttribute("src");
  dom.status.textContent = dataUrl === null ? "No image: the prompt is read as text alone." : `${name}: sent with the prompt.`;
  dom.control.dispatchEvent(new Event("change", { bubbles: true })); // the form is stale
}

function readFile(file) {
  return new Promise((resolve) => {
    const reader = new FileReader();
    reader.addEventListener("load", () => {
      setImage(String(reader.result), file.name || "pasted image");
      resolve();
    });
    reader.readAsDataURL(file);
  });
}

async function useSample() {
  const blob = await (await fetch(SAMPLE_URL)).blob();
  await readFile(new File([blob], "shapes.png", { type: blob.type }));
}

export function bindPromptImage() {
  // Shown for a model that reads images (form.js adaptInputs): the first time, the sample.
  // A view computed before it arrived (the page's first) is computed again with it.
  dom.control.addEventListener("reads-images", async () => {
    if (promptImage.dataUrl !== null || dom.control.dataset.asked) return;
    dom.control.dataset.asked = "true";
    await useSample();
    const request = state.request;
    if (request && !request.images && request.model === selectedModel()?.name) page.compute();
  });
  dom.file.addEventListener("change", () => {
    if (dom.file.files.length) readFile(dom.file.files[0]);
  });
  dom.sample.addEventListener("click", useSample);
  dom.clear.addEventListener("click", () => {
    dom.file.value = "";
    setImage(null, null);
  });
  document.addEventListener("paste", (event) => {
    if (dom.control.hidden) return;
    const item = [...(event.clipboardData?.items || [])].find((i) => i.type.startsWith("image/"));
    if (!item) return;
    event.preventDefault();
    readFile(item.getAsFile());
  });
  for (const control of [dom.layer, dom.head, dom.opacity, dom.scale]) {
    control.addEventListener("input", () => drawOverlay());
  }
  dom.query.addEventListener("change", () => {
    stopPlaying();
    chooseQuery(Number(dom.query.value));
  });
  dom.play.addEventListener("click", () => (overlay.timer ? stopPlaying() : play()));
}

// The query token's rows over the image, for the request drawn (overlay.base, taken when
// the panel was drawn: a Compute meanwhile does not mix into it): one answer per query
// (the pass is kept on the server, keyed by the pixels: each costs N x H x L_k).
async function rowsOf(q) {
  const body = { ...overlay.base, query_index: q };
  const key = JSON.stringify(body);
  if (!state.queries.has(key)) {
    const res = await requestAttention(body);
    if (res === null) return null;
    state.queries.set(key, res);
  }
  return state.queries.get(key);
}

function option(value, text) {
  const element = document.createElement("option");
  element.value = String(value);
  element.textContent = text;
  return element;
}

function fillSelect(select, count, prefix, meanText) {
  const kept = select.value;
  select.replaceChildren(option(MEAN, meanText), ...Array.from({ length: count }, (_, i) => option(i, `${prefix}${i}`)));
  if ([...select.options].some((o) => o.value === kept)) select.value = kept;
}

// Draw the image panel for the computed request (state.request): hidden without images.
export async function drawImageAttention() {
  const request = state.request;
  const ticket = (overlay.ticket += 1);
  stopPlaying();
  if (!request || !request.images || !promptImage.dataUrl) {
    dom.panel.hidden = true;
    clearPlots(dom.plots);
    overlay.res = null;
    return;
  }
  dom.panel.hidden = false;
  dom.panel.dataset.drawn = "false";
  overlay.base = viewRequest({
    hide_special_tokens: false, merge_words: false, layer_index: 0, head_index: 0,
    display_size: 8, top_k: 0,
  });
  const first = await rowsOf(0);
  if (first === null || ticket !== overlay.ticket || !first.images) return;
  const tokens = first.tokens[0];
  const imageTokens = new Set(first.images.flatMap((placed) => placed.positions));
  const promptLength = first.generation ? first.generation.prompt_length : tokens.length;
  dom.query.replaceChildren(...tokens.flatMap((token, i) => (imageTokens.has(i) ? [] : [
    option(i, `${i}: ${displayToken(token)}${i >= promptLength ? " (generated)" : ""}`),
  ])));
  fillSelect(dom.layer, first.num_layers, "L", "mean of layers");
  fillSelect(dom.head, first.num_heads, "H", "mean of heads");
  dom.play.hidden = promptLength >= tokens.length;
  overlay.promptLength = promptLength;
  // The prompt's last token first: its row chose the first generated token.
  await chooseQuery(promptLength - 1, ticket);
}

async function chooseQuery(q, ticket = overlay.ticket) {
  dom.query.value = String(q);
  const res = await busy(() => rowsOf(q), "Computing this token's rows…");
  if (res === null || ticket !== overlay.ticket) return;
  overlay.res = res;
  overlay.query = q;
  drawOverlay();
}

// (N, H, L_k) rows -> the chosen layer's and head's row (means where chosen).
function chosenRow(rows) {
  const layers = dom.layer.value === MEAN ? rows.map((_, n) => n) : [Number(dom.layer.value)];
  const length = shapeOf(rows)[2]; // (N, H, L_k)
  const row = new Float64Array(length);
  let count = 0;
  for (const n of layers) {
    const heads = dom.head.value === MEAN ? rows[n].map((_, h) => h) : [Number(dom.head.value)];
    for (const h of heads) {
      const values = rows[n][h];
      for (let k = 0; k < length; k += 1) row[k] += values[k];
      count += 1;
    }
  }
  return row.map((v) => v / count);
}

// One view of an image (one of its token grids: the image, Idefics3's tiles or its global
// view): the picture in its own pixels, the grid's cells over it (edges from the tokens'
// rectangles), coloured by the row's weight on each token.
function imageFigure(placed, grid, row, title) {
  const { rows, cols } = grid;
  const cell = (r, c) => placed.rectangles[grid.tokens[r * cols + c]];
  const xs = [...Array.from({ length: cols }, (_, c) => cell(0, c)[0]), cell(0, cols - 1)[2]];
  const ys = [...Array.from({ length: rows }, (_, r) => cell(r, 0)[1]), cell(rows - 1, 0)[3]];
  const z = Array.from({ length: rows }, (_, r) => Array.from({ length: cols },
    (_, c) => row[placed.positions[grid.tokens[r * cols + c]]]));
  const top = dom.scale.value === "absolute" ? 1 : Math.max(...z.flat(), 1e-9);
  return {
    traces: [{
      type: "heatmap", z, x: xs, y: ys, zmin: 0, zmax: top, colorscale: COLORSCALE,
      opacity: Number(dom.opacity.value), showscale: true, xgap: 0, ygap: 0,
      colorbar: { title: { text: "weight" } },
      hovertemplate: "x %{x:.0f}, y %{y:.0f} px<br>weight %{z:.4f}<extra></extra>",
    }],
    layout: {
      title: { text: escapeForPlotly(title), font: { size: 13 } },
      images: [{
        source: promptImage.dataUrl, xref: "x", yref: "y", x: 0, y: 0, sizex: placed.width,
        sizey: placed.height, sizing: "stretch", layer: "below", xanchor: "left", yanchor: "top",
      }],
      xaxis: { range: [0, placed.width], showgrid: false, zeroline: false, title: { text: "x (px)" } },
      yaxis: { range: [placed.height, 0], showgrid: false, zeroline: false, scaleanchor: "x", title: { text: "y (px)" } },
      margin: { l: 50, r: 20, t: 40, b: 40 },
      width: 520,
      height: Math.round(60 + 440 * Math.min(1.6, placed.height / placed.width)),
    },
  };
}

function drawOverlay() {
  const res = overlay.res;
  if (!res || !res.query_attentions) return;
  const row = chosenRow(res.query_attentions);
  const token = displayToken(res.tokens[0][overlay.query]);
  const where = `${dom.layer.value === MEAN ? "mean of layers" : `layer ${dom.layer.value}`}, ${dom.head.value === MEAN ? "mean of heads" : `head ${dom.head.value}`}`;
  clearPlots(dom.plots);
  let share = 0;
  for (const placed of res.images) {
    for (const p of placed.positions) share += row[p];
    for (const grid of placed.grids) {
      const view = placed.grids.length > 1 ? ` (${grid.name === "tiles" ? "its tiles" : "its global view"})` : "";
      const title = `${token} (${overlay.query}) → image ${placed.image + 1}${view}, ${where}`;
      addPlot(dom.plots, imageFigure(placed, grid, row, title), "plot image-overlay");
    }
  }
  dom.note.textContent = `Token ${overlay.query} (${token}) gives ${(100 * share).toFixed(1)}% of its attention to the image's tokens (${where}); each cell is the part of the picture one image token covers.`;
  overlay.row = Array.from(row);
  dom.panel.dataset.drawn = "true";
}

function stopPlaying() {
  if (overlay.timer) clearInterval(overlay.timer);
  overlay.timer = null;
  dom.play.textContent = "▶ Play the answer";
  dom.play.setAttribute("aria-pressed", "false");
}

// Step through the generated tokens, the overlay following each.
function play() {
  const last = overlay.res ? overlay.res.tokens[0].length - 1 : -1;
  let q = overlay.promptLength;
  if (q > last) return;
  dom.play.textContent = "❚❚ Pause";
  dom.play.setAttribute("aria-pressed", "true");
  const step = () => {
    if (q > last) {
      stopPlaying();
      return;
    }
    chooseQuery(q);
    q += 1;
  };
  step();
  overlay.timer = setInterval(step, PLAY_STEP_MS);
}
