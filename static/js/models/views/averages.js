// The averages view: each layer's head average, the mean of all layers and heads,
// attention rollout and the whole-model methods' maps (flow, value zeroing, gradient-
// weighted rollout), with a note when the first token is an attention sink.
import { paragraph } from "../../api.js";
import { clearPlots, thumbnailGrid } from "../../heatmap.js";
import { displayToken } from "../../lib/display.js";
import { layerSelect } from "../elements.js";
import { addMap } from "../figures.js";
import { describeGrid } from "../heads.js";
import { colourMode, perHeadMethod, valueName, weightsMethod } from "../form.js";
import { methodFigure } from "../methods.js";
import { addHint, targetText } from "../notes.js";
import { keyTokens, poolFactors, queryTokens, thumbnailHover } from "../response.js";
import { bindSelection } from "../selection.js";
import { page, state } from "../state.js";
import { MAP_SIDES, layerMaps } from "../stream.js";

const STRIP_COLUMNS = 10; // the most layers a row of the averages' strip

// The head average of each layer, one layer's head average, the mean over all layers
// and heads, and attention rollout (Abnar & Zuidema 2020).
export async function renderAverages(section, res, l) {
  const body = section.querySelector(".view-body");
  const maps = await layerMaps(res, l, MAP_SIDES.average);
  if (maps === null) return;
  clearPlots(body);
  addHint(body, "The head average of each layer, each scaled to its own maximum. Click " +
    "one to show it below.");
  // Up to STRIP_COLUMNS layers a row: 30 layers in one row would be slivers.
  const N = res.num_layers;
  const stripRows = Math.ceil(N / STRIP_COLUMNS);
  const stripCols = Math.ceil(N / stripRows);
  const layerAt = (r, c) => r * stripCols + c;
  const strip = thumbnailGrid(body, {
    rows: stripRows,
    cols: stripCols,
    count: N,
    cell: (r, c) => res.head_mean[layerAt(r, c)][0],
    rowName: "",
    colName: "L",
    cellTitle: (r, c) => `L${layerAt(r, c)}`,
    title: "Head average of each layer",
    valueName: valueName(),
    zmax: "each",
    scale: colourMode(queryTokens(res).length),
    hover: (r, c) => `layer ${layerAt(r, c)}, mean of ${res.num_heads} heads`,
    queryHover: thumbnailHover(res, "query"),
    keyHover: thumbnailHover(res, "key"),
    onClick: (r, c) => {
      layerSelect.value = String(layerAt(r, c));
      page.renderView();
    },
  });
  strip.id = "layer-strip";
  const [factor, keyFactor] = poolFactors(res.downsample);
  describeGrid(strip, res, res.head_mean.map((mean, n) => [`L${n}`, mean[0]]),
    "Head average of each layer", { factor, keyFactor });
  const grid = document.createElement("div");
  grid.className = "heads";
  body.append(grid);
  // Each figure: [name, {z, factor, keyFactor}, title]; pooled maps say so in the title.
  const [af, akf] = poolFactors(res.average_downsample);
  const pooledTitle = (title, f, kf) => (f > 1 || kf > 1 ? `${title}, block max of ${f} × ${kf} tokens` : title);
  const figures = [
    ["head-mean", { z: maps.headMean, factor: maps.factor, keyFactor: maps.keyFactor },
      pooledTitle(`Head average, layer ${l}`, maps.factor, maps.keyFactor)],
    ["layer-mean", { z: res.layer_mean[0], factor: af, keyFactor: akf },
      // a long input's layer mean is summed block by block: each cell a block's mean
      res.average_downsample?.method === "mean"
        ? `Average of all ${res.num_layers} layers and heads, block mean of ${af} × ${akf} tokens`
        : `Average of all ${res.num_layers} layers and heads`],
  ];
  if (res.rollout) {
    figures.push(["rollout", { z: res.rollout[0], factor: af, keyFactor: akf },
      "Attention rollout (Abnar & Zuidema 2020)"]);
  }
  const sink = attentionSink(res);
  if (sink) {
    showSinkNote(body, grid, sink);
    if (state.excludeSink) {
      for (const figure of figures) {
        if (!["head-mean", "layer-mean", "rollout"].includes(figure[0])) continue;
        figure[1] = { ...figure[1], z: withoutFirstToken(figure[1].z) };
        figure[2] += ", first token left out";
      }
    }
  }
  // The chosen method's map first: next to the picker, not under the others.
  const own = methodFigure(res, l);
  const formats = {};
  if (own) {
    const [factor, keyFactor] = own.averaged ? [af, akf] : [1, 1];
    figures.unshift([own.name, { z: own.z, factor, keyFactor, first: own.first }, own.title]);
    formats[own.name] = own.format;
    if (own.first) {
      paragraph(body, "hint method-window-note", `${own.title}: the method solves a max-flow ` +
        `problem per pair of tokens, so it runs on the last ${own.z.length} of the ` +
        `${queryTokens(res).length} tokens, among themselves (their weights on earlier ` +
        "tokens left out, each row renormalised). The other maps are of the whole input.");
    }
  }
  const plots = [strip.drawn];
  for (const [name, map, title] of figures) {
    const div = addMap(grid, res, map, title, "head-plot", formats[name] ?? {});
    div.dataset.map = name;
    if (name === "head-mean") div.drawn.then(() => bindSelection(div));
    plots.push(div.drawn);
  }
  if (res.target) paragraph(body, "hint target-note", targetText(res));
  if (res.rollout) {
    paragraph(body, "hint", "Rollout: per layer, Â = 0.5 · (head average) + 0.5 · I for " +
      "the residual connection, then Â_N ⋯ Â_1, computed with every token: row i is how " +
      "much of token i's last-layer representation flows from each input token; its rows " +
      "sum to 1.");
  } else if (perHeadMethod(res.method)) {
    paragraph(body, "hint", "Attention rollout multiplies attention weights through the " +
      "layers: switch Method back to the attention weights to see it.");
  } else {
    paragraph(body, "hint", "Attention rollout needs square maps through the layers: " +
      "cross-attention has none (open the encoder or decoder block for it).");
  }
  await Promise.all(plots);
}

// An attention sink (Xiao et al. 2023, "Efficient Streaming Language Models with Attention
// Sinks"): the share of the weight on the first token, the mean over queries 1.. of
// A[i, 0] / sum_j A[i, j] (row 0 has only itself in a causal map), in the average of all
// layers and heads and in rollout. {mean, rollout, token} when either is at least
// SINK_SHARE; null without one, with another method, or with pooled averages (their
// first column is a block of tokens).
const SINK_SHARE = 0.5;

function firstTokenShare(z) {
  let total = 0;
  for (let i = 1; i < z.length; i += 1) {
    const sum = z[i].reduce((acc, v) => acc + (v ?? 0), 0);
    total += sum > 0 ? (z[i][0] ?? 0) / sum : 0;
  }
  return z.length > 1 ? total / (z.length - 1) : 0;
}

function attentionSink(res) {
  const ad = res.average_downsample;
  if ((res.method && !weightsMethod(res.method)) || (ad && (ad.factor > 1 || ad.key_factor > 1))
    || !res.layer_mean || queryTokens(res).length < 3) return null;
  const mean = firstTokenShare(res.layer_mean[0]);
  const rollout = res.rollout ? firstTokenShare(res.rollout[0]) : null;
  if (mean < SINK_SHARE && (rollout ?? 0) < SINK_SHARE) return null;
  return { mean, rollout, token: keyTokens(res)[0] };
}

// `z` with its first row and column left out (null: drawn gray, as masked cells), each
// other row divided by its new sum (weights). The shape stays: a click on row i and the
// selection's outlines still mean token i.
function withoutFirstToken(z) {
  return z.map((row, i) => {
    if (i === 0) return row.map(() => null);
    const sum = row.reduce((acc, v, j) => acc + (j === 0 ? 0 : (v ?? 0)), 0);
    return row.map((v, j) => (j === 0 || v === null ? null : (sum > 0 ? v / sum : 0)));
  });
}

// The sink's note above the averages, with the choice to leave the first token out.
function showSinkNote(body, before, sink) {
  const note = document.createElement("div");
  note.className = "sink-note";
  note.setAttribute("role", "note");
  const pct = (v) => `${(100 * v).toFixed(0)}%`;
  const where = sink.rollout === null ? "" : `, and ${pct(sink.rollout)} of rollout's`;
  paragraph(note, "", `Attention sink: on average ${pct(sink.mean)} of each row's weight ` +
    `(all layers and heads)${where} lands on the first token, “${displayToken(sink.token)}”. ` +
    "Models park attention there when a head has nothing to attend to (Xiao et al. 2023), " +
    "so rollout mostly says that everything flows from it. Norm-based attention (Method) " +
    "weighs each token by what its value vector carries, and the gradient methods by what " +
    "the prediction depends on; or leave the first token out here.");
  const label = document.createElement("label");
  label.className = "inline";
  const box = document.createElement("input");
  box.type = "checkbox";
  box.id = "exclude-sink";
  box.checked = Boolean(state.excludeSink);
  box.addEventListener("change", () => {
    state.excludeSink = box.checked;
    page.renderView();
  });
  label.append(box, " leave the first token out of the averages and rollout (rows renormalised)");
  note.append(label);
  note.dataset.share = sink.mean.toFixed(4);
  if (sink.rollout !== null) note.dataset.rolloutShare = sink.rollout.toFixed(4);
  body.insertBefore(note, before);
}
