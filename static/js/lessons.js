// The lesson views of the tutorials, one renderer each. Every renderer gets
// ctx = {data, request, sequence, head, fetchJson, scale, shown, selected, select}: the
// last /attention response, the request read from the form, the selected sequence and head,
// the fetch helper that reports API errors beside the form, the colour-scale choice,
// shown(ms) for a view that draws its maps on screen first (the time they were drawn), the
// selected query positions (a Set) and select(q, add) to change them (tokens.js).
import {
  COMPACT, DISPLAY_SIZE, LAYER_FIELDS, PAD_LABEL, oneHeadAnswer, option, paragraph, parseNumber,
} from "./api.js";
import {
  addLazyPlot, addPlot, attentionHover, clearPlots, dimensionHover, drawOnScreenFirst,
  escapeForPlotly, heatmapFigure, maxOf, resolveScale, thumbnailGrid, tokenHover,
  visibleWeights,
} from "./heatmap.js";
import { tokenStrip } from "./tokens.js";
import { lineView, neuronView } from "./tokenviews.js";

const ALL_STAGES = ["q", "k", "v", "scores", "scaled_scores", "masked_scores", "head_output"];

function range(n) {
  return [...Array(n).keys()];
}

function note(container, text) {
  return paragraph(container, "view-note", text);
}

// The grid (div.plots) the figures of a view go in.
function plotGrid(body) {
  const grid = document.createElement("div");
  grid.className = "plots";
  body.append(grid);
  return grid;
}

function table(container, header, rows, highlight = () => false) {
  const element = document.createElement("table");
  element.className = "data-table";
  const head = element.createTHead().insertRow();
  for (const cell of header) {
    const th = document.createElement("th");
    th.textContent = cell;
    head.append(th);
  }
  const body = element.createTBody();
  for (const row of rows) {
    const tr = body.insertRow();
    if (highlight(row)) tr.className = "current";
    for (const cell of row) tr.insertCell().textContent = String(cell);
  }
  container.append(element);
  return element;
}

// Only the selected sequence and head travel back, as base64 float32.
function oneHead(ctx) {
  return { sequence_index: ctx.sequence, head_index: ctx.head, ...COMPACT };
}

function layerFields(request) {
  return Object.fromEntries(LAYER_FIELDS.map((name) => [name, request[name]]));
}

// A view control's value, trimmed.
function controlValue(id) {
  return document.getElementById(id).value.trim();
}

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

// 2. The scale (tutorial 001 section 7).
async function renderScaling(body, ctx) {
  const seed = typeof ctx.request.seed === "number" ? ctx.request.seed : 0;
  const res = await ctx.fetchJson("/api/v1/lessons/scaling", { seed });
  clearPlots(body);
  if (!res) return;
  note(body, `Random Q, K ~ N(0, 1), ${res.num_samples} draws of ${res.length} × ${res.length} ` +
    "scores per d_k. Q·K has variance d_k: without 1/√d_k, softmax turns one-hot as d_k " +
    "grows; with it, the weights stay spread. Turn the scale off in the form (\"scale by " +
    "1/√d_k\") to see it on your own input.");
  const grid = plotGrid(body);
  for (const [kind, label] of [["unscaled", "no scaling"], ["scaled", "with 1/√d_k"]]) {
    for (const c of res.cases) {
      const stats = c[kind];
      const centres = stats.counts.map((_, i) => (stats.bin_edges[i] + stats.bin_edges[i + 1]) / 2);
      addPlot(grid, {
        traces: [{ type: "bar", x: centres, y: stats.counts, marker: { color: kind === "scaled" ? "#4292c6" : "#b2182b" } }],
        layout: {
          title: { text: `d_k = ${c.d_k}, ${label}<br>entropy ${stats.mean_entropy_bits.toFixed(2)} bits`, font: { size: 12 } },
          margin: { l: 50, r: 8, t: 48, b: 40 },
          xaxis: { title: { text: "attention weight" }, range: [0, 1] },
          yaxis: { title: { text: "count" } },
          bargap: 0.05,
        },
      }, "plot scaling-plot");
    }
  }
  table(body, ["d_k", "entropy with scale (bits)", "entropy without (bits)",
    "rows one-hot without scale (max > 0.99)", "uniform would be (bits)"],
  res.cases.map((c) => [c.d_k, c.scaled.mean_entropy_bits.toFixed(3), c.unscaled.mean_entropy_bits.toFixed(3),
    `${(100 * c.unscaled.one_hot_fraction).toFixed(1)}%`, Math.log2(res.length).toFixed(3)]));
}

// 3. Why the causal mask (tutorial 002 section 3.4).
async function renderDecoding(body, ctx) {
  const sequence = ctx.request.sequences[ctx.sequence];
  const res = await ctx.fetchJson("/api/v1/lessons/decoding", { sequence, ...layerFields(ctx.request) });
  clearPlots(body);
  if (!res) return;
  const h = ctx.head;
  note(body, `Sequence ${ctx.sequence}, head ${h}. Step by step: ${res.labels.length} forward ` +
    "passes, one per prefix, each adding the newest token's row. With the causal mask, one pass " +
    `gives the same: max |Δ| = ${res.masked_max_abs_diff.toExponential(1)} (0 up to rounding). ` +
    `Without the mask, max |Δ| = ${res.unmasked_max_abs_diff.toExponential(2)}: earlier ` +
    "tokens see later ones and their outputs change.").dataset.maskedDiff = String(res.masked_max_abs_diff);
  const grid = plotGrid(body);
  const common = {
    rowLabels: res.labels, colLabels: res.labels, zmin: 0, zmax: 1, valueName: "weight",
    scale: resolveScale(ctx.scale, res.labels.length),
  };
  addPlot(grid, heatmapFigure({ ...common, z: res.step_weights[h], title: "step by step (one pass per prefix)" }), "plot decoding-plot");
  addPlot(grid, heatmapFigure({ ...common, z: res.masked_weights[h], title: "one pass, causal mask: identical" }), "plot decoding-plot");
  addPlot(grid, heatmapFigure({ ...common, z: res.unmasked_weights[h], title: "one pass, no mask: sees the future" }), "plot decoding-plot");
  addPlot(grid, {
    traces: [{ type: "bar", x: res.labels.map((_, i) => i), y: res.unmasked_output_diff, marker: { color: "#b2182b" } }],
    layout: {
      title: { text: "how far each output moves without the mask", font: { size: 12 } },
      margin: { l: 50, r: 8, t: 36, b: 64 },
      xaxis: { tickvals: res.labels.map((_, i) => i), ticktext: res.labels.map(escapeForPlotly), tickangle: -45 },
      yaxis: { title: { text: "max |Δ output|" } },
    },
  }, "plot decoding-plot");
}

// 4. Parameters (tutorial 001 section 5, tutorial 002 point 1).
async function renderParameters(body, ctx) {
  const { d_model, num_heads } = ctx.request;
  const res = await ctx.fetchJson(`/api/v1/lessons/parameters?d_model=${encodeURIComponent(d_model)}&num_heads=${encodeURIComponent(num_heads)}`);
  clearPlots(body);
  if (!res) return;
  note(body, `d_model = ${res.d_model}, num_heads = ${res.num_heads}: each of W_q, W_k, W_v, ` +
    `W_o is a ${res.d_model} × ${res.d_model} matrix plus a bias of ${res.d_model}. The heads are ` +
    "slices of these matrices, so the total does not change with num_heads.");
  table(body, ["parameter", "shape", "count"],
    res.rows.map((r) => [r.name, r.shape.join(" × "), r.count.toLocaleString()])
      .concat([["total", `4·${res.d_model}² + 4·${res.d_model}`, res.total.toLocaleString()]]));
  table(body, ["num_heads", "d_k", "total parameters"],
    res.by_num_heads.map((r) => [r.num_heads, r.d_k, r.total.toLocaleString()]),
    (row) => row[0] === res.num_heads).classList.add("by-heads");
}

// 5. Head summaries: head average, entropy and max weight per head.
async function renderSummary(body, ctx) {
  const data = await ctx.fetchJson("/api/v1/attention", {
    ...ctx.request, include: ["head_mean"], sequence_index: ctx.sequence,
    display_size: DISPLAY_SIZE, ...COMPACT,
  });
  clearPlots(body);
  if (!data) return;
  const b = 0;
  const s = data.head_summary;
  const entropy = s.entropy_bits[b];
  const heads = entropy.map((_, h) => h);
  const sharpest = heads.reduce((a, h) => (entropy[h] < entropy[a] ? h : a), 0);
  const diffuse = heads.reduce((a, h) => (entropy[h] > entropy[a] ? h : a), 0);
  note(body, `Sequence ${ctx.sequence}: the sharpest head is ${sharpest} (${entropy[sharpest].toFixed(2)} ` +
    `bits), the most diffuse ${diffuse} (${entropy[diffuse].toFixed(2)} bits). Entropy is the ` +
    "mean over query rows of −Σ w log₂ w: 0 = one-hot, log₂(#keys) = uniform.");
  const grid = plotGrid(body);
  addPlot(grid, heatmapFigure({
    z: visibleWeights(s.mean_weights[b], data.attn_mask[b]), rowLabels: data.query_labels[b],
    colLabels: data.key_labels[b], ...attentionHover(data, b), title: "average of the heads",
    zmin: 0, valueName: "mean weight", maskedNote: "masked: weight 0",
    scale: resolveScale(ctx.scale, data.full_shape[2]),
  }), "plot summary-plot");
  for (const [values, title, unit, color] of [
    [entropy, "mean row entropy (bits)", "bits", "#4292c6"],
    [s.max_weight[b], "max weight", "weight", "#08519c"],
  ]) {
    addPlot(grid, {
      traces: [headBars(values, color, unit)],
      layout: {
        title: { text: title, font: { size: 12 } },
        margin: { l: 56, r: 8, t: 36, b: 50 },
        xaxis: { type: "category" },
        // A numeric axis from 0, with some room above the tallest bar for its value.
        yaxis: {
          type: "linear", range: [0, 1.18 * Math.max(...values, 1e-6)], tickformat: ".2~f",
          title: { text: unit },
        },
      },
    }, "plot summary-plot");
  }
}

// One bar per head (categories "Head 0", "Head 1", ...) with its value printed above it
// when there are few heads: a head whose value is 0 still shows "0.00".
function headBars(values, color, unit) {
  return {
    type: "bar",
    x: values.map((_, h) => `Head ${h}`),
    y: values,
    marker: { color },
    text: values.length <= 16 ? values.map((v) => v.toFixed(2)) : undefined,
    textposition: "outside",
    cliponaxis: false,
    hovertemplate: `%{x}: %{y:.4f} ${unit}<extra></extra>`,
  };
}

// 6. Dropout on the weights (tutorials 001, 004).
async function renderDropout(body, ctx) {
  const p = parseNumber(controlValue("dropout-p"));
  const seed = parseNumber(controlValue("dropout-seed"));
  const res = await ctx.fetchJson("/api/v1/attention", {
    ...ctx.request, dropout: p, dropout_seed: seed, ...oneHead(ctx),
  });
  clearPlots(body);
  if (!res) return;
  const b = 0;
  const h = ctx.head;
  const after = res.dropped_weights ? res.dropped_weights[b][0] : res.weights[b][0];
  const sums = after.filter((_, i) => !res.fully_masked[b][i]).map((row) => row.reduce((x, y) => x + y, 0));
  const scale = 1 / (1 - res.dropout);
  note(body, `Dropout in training mode, as torch.nn.functional.dropout defines it: each weight ` +
    `is zeroed with probability p = ${res.dropout} and the rest are multiplied by 1/(1−p) = ` +
    `${scale.toFixed(3)}, so each row sums to 1 in expectation (here between ` +
    `${Math.min(...sums).toFixed(3)} and ${Math.max(...sums).toFixed(3)}). The layer output shown ` +
    "elsewhere is the eval-mode one.");
  const grid = plotGrid(body);
  const zmax = Math.max(maxOf(after), maxOf(res.weights[b][0]), 1e-12);
  const common = {
    rowLabels: res.query_labels[b], colLabels: res.key_labels[b], zmin: 0, zmax, valueName: "weight",
    maskedNote: "masked: weight 0", scale: resolveScale(ctx.scale, res.query_labels[b].length),
  };
  addPlot(grid, heatmapFigure({ ...common, z: visibleWeights(res.weights[b][0], res.attn_mask[b]), title: `head ${h} before dropout` }), "plot dropout-plot");
  addPlot(grid, heatmapFigure({ ...common, z: visibleWeights(after, res.attn_mask[b]), title: `after dropout (p = ${res.dropout})` }), "plot dropout-plot");
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

// Compare: one head's map for sequence A (the selected one) and B (#compare-sequence),
// and A − B. Masked cells are masked in the difference when either side masks them.
async function renderCompare(body, ctx) {
  const { data } = ctx;
  const select = document.getElementById("compare-sequence");
  const count = data.weights.length;
  if (select.options.length !== count) {
    const previous = select.value;
    select.replaceChildren(...data.key_labels.map((labels, b) => (
      option(String(b), `${b}: ${labels.slice(0, 6).join(" ")}`))));
    select.value = previous && Number(previous) < count ? previous : String(count > 1 ? 1 : 0);
  }
  const a = ctx.sequence;
  const b = Number(select.value);
  const h = ctx.head;
  const mapA = visibleWeights(data.weights[a][h], data.attn_mask[a]);
  const mapB = visibleWeights(data.weights[b][h], data.attn_mask[b]);
  const diff = mapA.map((row, i) => row.map((v, j) => (
    v === null || mapB[i][j] === null ? null : v - mapB[i][j])));
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
      z: diff, rowLabels: range(diff.length).map(String), colLabels: range((diff[0] || []).length).map(String),
      signed: true, valueName: "A − B", colorTitle: "weight A − B", title: "A − B",
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
