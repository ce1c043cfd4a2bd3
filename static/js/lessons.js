// The lesson views of the tutorials, one renderer each. Every renderer gets
// ctx = {data, request, sequence, head, fetchJson, scale, shown, selected, select}: the
// last /attention response, the request read from the form, the selected sequence and head,
// the fetch helper that reports API errors beside the form, the colour-scale choice,
// shown(ms) for a view that draws its maps on screen first (the time they were drawn), the
// selected query positions (a Set) and select(q, add) to change them (tokens.js). The
// tutorials' experiments (scale, decoding, parameters, summary, dropout) are in
// lessons/experiments.js, what the views share in lessons/common.js.
import { PAD_LABEL, oneHeadAnswer, option, parseNumber } from "./api.js";
import {
  addLazyPlot, addPlot, attentionHover, clearPlots, dimensionHover, drawOnScreenFirst,
  heatmapFigure, maxOf, resolveScale, thumbnailGrid, tokenHover, visibleWeights,
} from "./heatmap.js";
import {
  renderDecoding, renderDropout, renderParameters, renderScaling, renderSummary,
} from "./lessons/experiments.js";
import {
  controlValue, layerFields, note, oneHead, plotGrid, range, sequenceChoices,
} from "./lessons/common.js";
import { tokenStrip } from "./tokens.js";
import { lineView, neuronView } from "./tokenviews.js";

const ALL_STAGES = ["q", "k", "v", "scores", "scaled_scores", "masked_scores", "head_output"];

// 1. Step-through of one head (tutorials 000, 003, 004).
async function renderStepThrough(body, ctx) {
  const res = await ctx.fetchJson("/api/v1/attention", {
    ...ctx.request, include: ALL_STAGES, ...oneHead(ctx),
  });
  clearPlots(body);
  if (!res) return;
  const b = 0;
  const h = 0;
  const q = res.query_labels[b];
  const k = res.key_labels[b];
  const dims = range(res.d_k).map(String);
  const features = { colLabels: dims, colHover: dimensionHover(res.d_k), xTitle: "d_k" };
  const st = res.stages;
  note(body, `Head ${ctx.head} of sequence ${ctx.sequence}, stage by stage: Q, K and V are (L, d_k) = ` +
    `(${q.length}|${k.length}, ${res.d_k}); the scores are (L_q, L_k). Masked cells are ` +
    `shown as masked, not as the fill value.`);
  const grid = plotGrid(body);
  const figures = [
    { z: st.q[b][h], rowLabels: q, ...features, title: "Q (head slice of x W_q)", signed: true },
    { z: st.k[b][h], rowLabels: k, ...features, title: "K (head slice of x W_k)", yTitle: "Key", signed: true },
    { z: st.v[b][h], rowLabels: k, ...features, title: "V (head slice of x W_v)", yTitle: "Key", signed: true },
    { z: st.scores[b][h], rowLabels: q, colLabels: k, title: "1. scores Q Kᵀ", signed: true, valueName: "score" },
    {
      z: st.scaled_scores[b][h], rowLabels: q, colLabels: k, signed: true, valueName: "score",
      title: res.scale ? `2. scaled Q Kᵀ / √${res.d_k}` : "2. not scaled (scale is off)",
    },
    {
      z: st.masked_scores[b][h], rowLabels: q, colLabels: k, signed: true, valueName: "score",
      title: `3. masked (${res.mask})`, maskedNote: `masked: set to ${res.mask_fill} before softmax`,
    },
    {
      z: visibleWeights(res.weights[b][h], res.attn_mask[b]), rowLabels: q, colLabels: k,
      title: "4. softmax weights", zmin: 0, zmax: 1, valueName: "weight", maskedNote: "masked: weight 0",
      scale: resolveScale(ctx.scale, q.length),
    },
    { z: st.head_output[b][h], rowLabels: q, ...features, title: "5. head output = weights · V", signed: true },
  ];
  // Eight maps take about 0.35 s to draw: the ones on screen are drawn first.
  const plots = figures.map((options) => addLazyPlot(grid, heatmapFigure(options), "plot stage-plot"));
  ctx.shown(await drawOnScreenFirst(plots));
}


function blockMask(queryLabels, keyLabels, causal) {
  return queryLabels.map((_, i) => keyLabels.map((key, j) => key !== PAD_LABEL && (!causal || j <= i)));
}

// One figure of N x H thumbnails; clicking one enlarges it into `enlarged`.
// The colour scale (ctx.scale, resolveScale's) colours the thumbnails and the enlarged map.
function drawGrid(container, enlarged, block) {
  const { weights, b, queryLabels, keyLabels, causal, name } = block;
  const mask = blockMask(queryLabels, keyLabels, causal);
  let zmax = 0;
  for (const layer of weights) for (const head of layer[b]) zmax = Math.max(zmax, maxOf(head));
  block.top = zmax;
  const div = thumbnailGrid(container, {
    rows: weights.length,
    cols: weights[0][b].length,
    cell: (l, h) => visibleWeights(weights[l][b][h], mask),
    rowName: "L",
    colName: "H",
    title: name,
    zmax,
    scale: block.scale,
    hover: (l, h) => `layer ${l}, head ${h}`,
    queryHover: tokenHover(queryLabels),
    keyHover: tokenHover(keyLabels),
    onClick: (l, h) => showEnlarged(enlarged, block, l, h, mask),
  });
  div.dataset.block = name;
  return div;
}

function showEnlarged(enlarged, block, l, h, mask) {
  clearPlots(enlarged);
  enlarged.dataset.layer = String(l);
  enlarged.dataset.head = String(h);
  addPlot(enlarged, heatmapFigure({
    z: visibleWeights(block.weights[l][block.b][h], mask),
    rowLabels: block.queryLabels, colLabels: block.keyLabels,
    title: `${block.name}: layer ${l}, head ${h}`, zmin: 0, valueName: "weight",
    maskedNote: "masked: weight 0", scale: block.scale,
    zmax: block.scale === "shared" ? block.top : undefined,
  }), "plot enlarged-plot");
}

// The stack's masks are fixed (the API's transformer lesson takes no mask field): the
// form's mask checkboxes are disabled on this tab (attnviz.js), and this note says why.
const LAYER_MASKS = "Masks on this tab are fixed, as in tutorial 004: the encoder " +
  "self-attention masks padding keys only (it is never causal), the decoder self-attention " +
  "masks padding and future keys, the cross attention padding keys of the source. The " +
  "form's padding and causal checkboxes apply to the other tabs.";

// 7. The encoder layer and the decoder side (tutorial 004).
async function renderLayers(body, ctx) {
  const request = {
    sequences: ctx.request.sequences,
    ...layerFields(ctx.request),
    num_layers: parseNumber(controlValue("num-layers")),
    positional_encoding: controlValue("positional-encoding"),
  };
  if (ctx.request.targets) request.targets = ctx.request.targets;
  const dff = controlValue("d-ff");
  if (dff !== "") request.d_ff = parseNumber(dff);
  const res = await ctx.fetchJson("/api/v1/lessons/transformer", request);
  clearPlots(body);
  if (!res) return;
  const b = ctx.sequence;
  note(body, `${res.num_layers} encoder layer(s)${res.target_labels ? " and as many decoder layers" : ""}: ` +
    "self-attention → add & norm → feed-forward (d_ff " + `${res.d_ff}, ReLU) → add & norm; ` +
    `positional encoding: ${res.positional_encoding}. ${res.num_parameters.toLocaleString()} ` +
    "parameters. Rows are layers (L), columns heads (H); click a thumbnail to enlarge it.");
  note(body, LAYER_MASKS).classList.add("layers-masks");
  const enlarged = document.createElement("div");
  enlarged.className = "enlarged";
  const grids = document.createElement("div");
  body.append(grids, enlarged);
  const source = res.source_labels[b];
  const blocks = [{ name: "encoder self-attention", weights: res.encoder_weights, b, queryLabels: source, keyLabels: source, causal: false }];
  if (res.target_labels) {
    const target = res.target_labels[b];
    blocks.push({ name: "decoder masked self-attention", weights: res.decoder_self_weights, b, queryLabels: target, keyLabels: target, causal: true });
    blocks.push({ name: "decoder cross attention", weights: res.cross_weights, b, queryLabels: target, keyLabels: source, causal: false });
  }
  for (const block of blocks) {
    block.scale = resolveScale(ctx.scale, block.queryLabels.length);
    drawGrid(grids, enlarged, block);
  }
  showEnlarged(enlarged, blocks[0], 0, 0, blockMask(source, source, false));
}

// Lines: BertViz's head view of the drawn maps (tokenviews.js lineView). The heads shown
// are kept across redraws (all of them at first).
const linesHeads = { count: 0, visible: new Set() };

async function renderLines(body, ctx) {
  const { data } = ctx;
  const b = ctx.sequence;
  const count = data.shape[1];
  if (linesHeads.count !== count) {
    linesHeads.count = count;
    linesHeads.visible = new Set(Array.from({ length: count }, (_, h) => h));
  }
  const box = document.createElement("div");
  box.className = "line-box";
  body.replaceChildren(box);
  lineView(box, {
    queries: data.query_labels[b],
    keys: data.key_labels[b],
    maps: data.weights[b].map((map) => visibleWeights(map, data.attn_mask[b])),
    selected: ctx.selected,
    visible: linesHeads.visible,
    onSelect: (q, add) => ctx.select(q, add),
  });
}

// Neuron: one query (the first selected, else 0) through the selected head, from the
// head's Q and K stages (tutorial 001: softmax(q · k / √d_k)).
async function renderNeuron(body, ctx) {
  const res = await ctx.fetchJson("/api/v1/attention", {
    ...ctx.request, include: ["q", "k"], ...oneHead(ctx),
  });
  body.replaceChildren();
  if (!res) return;
  const head = oneHeadAnswer(res);
  const { queries, keys } = head;
  const chosen = [...ctx.selected].filter((q) => q < queries.length);
  const q = chosen.length ? Math.min(...chosen) : 0;
  const strip = document.createElement("div");
  strip.className = "strip-box";
  body.append(strip);
  tokenStrip(strip, queries, {
    selected: new Set([q]), label: "Query token", onSelect: (p) => ctx.select(p, false),
  });
  const box = document.createElement("div");
  body.append(box);
  const scaling = res.scale ? 1 / Math.sqrt(res.d_k) : 1;
  neuronView(box, {
    title: `Head ${ctx.head} of sequence ${ctx.sequence}, query ${q} (${queries[q]}): d_k = ` +
      `${res.d_k}, scaled by ${res.scale ? `1/√${res.d_k}` : "1 (the scale is off)"}; ` +
      "masked keys get weight 0.",
    queryLabel: queries[q],
    keyLabels: keys,
    query: head.stages.q[q],
    keys: head.stages.k,
    scaling,
    masked: head.mask[q].map((attend) => !attend),
    weights: head.weights[q],
  });
  box.dataset.query = String(q);
}

// The rows or columns of a map of `length` positions pooled in blocks of `factor`
// (`count` of them): labelled by their first position ("288"), hovered by all of them
// ("288–290").
function positionAxis(count, factor, length) {
  const first = range(count).map((i) => i * factor);
  const hover = first.map((p) => {
    const last = Math.min(p + factor, length) - 1;
    return p === last ? String(p) : `${p}–${last}`;
  });
  return { labels: first.map(String), hover };
}

// Compare: one head's map for sequence A (the selected one) and B (#compare-sequence),
// and A − B. Masked cells are masked in the difference when either side masks them.
async function renderCompare(body, ctx) {
  const { data } = ctx;
  const select = document.getElementById("compare-sequence");
  const count = data.weights.length;
  // B's choices name each sequence by its own first tokens (sequenceChoices), refreshed
  // with every new input (the same number of sequences may hold other tokens).
  const choices = sequenceChoices(ctx.request);
  if (select.dataset.choices !== JSON.stringify(choices)) {
    const previous = select.value;
    select.replaceChildren(...choices.map((text, b) => option(String(b), text)));
    select.dataset.choices = JSON.stringify(choices);
    select.value = previous && Number(previous) < count ? previous : String(count > 1 ? 1 : 0);
  }
  if (count < 2) {
    // One sequence would be compared with itself (A − B all 0).
    clearPlots(body);
    const ask = note(body, "Compare needs a second sequence: add a line to the Sequences " +
      "box and press Compute.");
    ask.classList.add("compare-ask");
    const button = document.createElement("button");
    button.type = "button";
    button.className = "secondary";
    button.textContent = "Add a second line";
    button.addEventListener("click", () => {
      const box = document.getElementById("sequences");
      if (!box.value.endsWith("\n")) box.value += "\n";
      box.focus();
      box.setSelectionRange(box.value.length, box.value.length);
    });
    ask.append(" ", button);
    return;
  }
  const a = ctx.sequence;
  const b = Number(select.value);
  const h = ctx.head;
  const mapA = visibleWeights(data.weights[a][h], data.attn_mask[a]);
  const mapB = visibleWeights(data.weights[b][h], data.attn_mask[b]);
  const diff = mapA.map((row, i) => row.map((v, j) => (
    v === null || mapB[i][j] === null ? null : v - mapB[i][j])));
  // The difference's rows and columns are positions (blocks of them when pooled).
  const [, , Lq, Lk] = data.full_shape;
  const rows = positionAxis(diff.length, data.downsample?.factor_q ?? 1, Lq);
  const cols = positionAxis((diff[0] || []).length, data.downsample?.factor_k ?? 1, Lk);
  clearPlots(body);
  const grid = plotGrid(body);
  const zmax = Math.max(maxOf(mapA), maxOf(mapB), 1e-12);
  const common = {
    zmin: 0, zmax, valueName: "weight", maskedNote: "masked: weight 0", scale: "shared",
  };
  const plots = [
    addPlot(grid, heatmapFigure({
      ...common, z: mapA, rowLabels: data.query_labels[a], colLabels: data.key_labels[a],
      ...attentionHover(data, a), title: `A: sequence ${a}, head ${h}`,
    }), "plot compare-plot"),
    addPlot(grid, heatmapFigure({
      ...common, z: mapB, rowLabels: data.query_labels[b], colLabels: data.key_labels[b],
      ...attentionHover(data, b), title: `B: sequence ${b}, head ${h}`,
    }), "plot compare-plot"),
    addPlot(grid, heatmapFigure({
      z: diff, rowLabels: rows.labels, colLabels: cols.labels, rowHover: rows.hover,
      colHover: cols.hover, signed: true,
      valueName: "A − B", colorTitle: "weight A − B", title: "A − B",
      maskedNote: "masked in A or B", yTitle: "Query position", xTitle: "Key position",
    }), "plot compare-plot"),
  ];
  plots[2].dataset.map = "difference";
  await Promise.all(plots.map((div) => div.drawn));
}

export const VIEWS = {
  lines: { usesHead: false, render: renderLines },
  compare: { usesHead: true, render: renderCompare },
  neuron: { usesHead: true, render: renderNeuron },
  step: { usesHead: true, render: renderStepThrough },
  scaling: { usesHead: false, render: renderScaling },
  decoding: { usesHead: true, render: renderDecoding },
  parameters: { usesHead: false, render: renderParameters },
  summary: { usesHead: false, render: renderSummary },
  dropout: { usesHead: true, render: renderDropout },
  layers: { usesHead: false, render: renderLayers },
};
