// The tutorials' experiments as lesson views: the scale, causal decoding, the parameter
// count, the head summaries and dropout (each view's number is its tutorial's section).
import { COMPACT, DISPLAY_SIZE, parseNumber } from "../api.js";
import {
  addPlot, attentionHover, clearPlots, escapeForPlotly, heatmapFigure, maxOf, resolveScale,
  visibleWeights,
} from "../heatmap.js";
import {
  LESSON_LIMITS, controlValue, layerFields, note, oneHead, plotGrid, table, tokenCount,
} from "./common.js";

// 2. The scale (tutorial 001 section 7).
export async function renderScaling(body, ctx) {
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
export async function renderDecoding(body, ctx) {
  const sequence = ctx.request.sequences[ctx.sequence];
  const length = tokenCount(sequence);
  if (length > LESSON_LIMITS.decoding_tokens) {
    clearPlots(body);
    note(body, `Sequence ${ctx.sequence} has ${length} tokens. This lesson runs one forward ` +
      `pass per prefix, so it takes sequences of up to ${LESSON_LIMITS.decoding_tokens} ` +
      "tokens: choose a shorter sequence above, or shorten this one, to compare step-by-step " +
      "decoding with one causal pass. The other views show this sequence whole.")
      .classList.add("lesson-limit-note");
    return;
  }
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
export async function renderParameters(body, ctx) {
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
export async function renderSummary(body, ctx) {
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
    "mean over query rows of −Σ w log₂ w: 0 = one-hot, log₂(#keys) = uniform. The " +
    "largest weight of each row, averaged over the rows, is 1 for a head whose rows are " +
    "one-hot and 1/#keys for uniform rows.");
  const grid = plotGrid(body);
  addPlot(grid, heatmapFigure({
    z: visibleWeights(s.mean_weights[b], data.attn_mask[b]), rowLabels: data.query_labels[b],
    colLabels: data.key_labels[b], ...attentionHover(data, b), title: "average of the heads",
    zmin: 0, valueName: "mean weight", maskedNote: "masked: weight 0",
    scale: resolveScale(ctx.scale, data.full_shape[2]),
  }), "plot summary-plot");
  for (const [values, title, unit, color] of [
    [entropy, "mean row entropy (bits)", "bits", "#4292c6"],
    // Not the head's largest weight: under a causal mask row 0 sees one key, so that is
    // 1.00 for every head.
    [s.mean_row_max[b], "mean of each row's largest weight", "weight", "#08519c"],
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
export async function renderDropout(body, ctx) {
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
