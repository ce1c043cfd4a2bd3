// The text beside the views: the summary line and the note under it, the methods' notes,
// the target a gradient method explained, the heads switched off and what that changed,
// what the colour scales mean, and the hints above figures.
import { paragraph, shapeOf } from "../api.js";
import { displayToken, displayTokens } from "../lib/display.js";
import { causalBlock, familySpec, groupedQueryText } from "./catalog.js";
import {
  CONFIG, ablationNote, hideSpecial, mergeWords, methodNote, methodSelect, restoreHeads, sequenceLabel,
  targetControl,
} from "./elements.js";
import { ablatedHeads, gradientMethod, otherMethod } from "./form.js";
import { keyTokens, kvGroups, poolFactors, queryTokens } from "./response.js";
import { MAP_SIDES } from "./stream.js";

const BLOCK_WORDS = {
  encoder: "encoder self-attention",
  decoder: "decoder self-attention (causal)",
  cross: "cross-attention (decoder queries, encoder keys)",
};

// The maps fetched at most MAP_SIDES per side, as the display note names them.
const MAP_NAMES = {
  layer: "the layer view", lines: "the line view", average: "a layer's head average",
  compare: "compare", head: "an enlarged head",
};
const joined = (items) => new Intl.ListFormat("en", { type: "conjunction" }).format(items);

export function describe(res) {
  const [, , H] = res.shape;
  const grouped = groupedQueryText(res.num_heads, res.num_key_value_heads);
  const lq = queryTokens(res).length;
  const lk = keyTokens(res).length;
  const parts = [
    `${res.model} (${res.family}, ${res.architecture}): ${res.num_layers} layers × ` +
      `${res.num_heads} heads${grouped ? `, ${grouped}` : ""}, d_model ${res.d_model}`,
  ];
  if (familySpec(res).blocks.length > 1) parts.push(BLOCK_WORDS[res.block]);
  parts.push(`attentions (N, B, H, L_q, L_k) = (${res.shape[0]}, 1, ${H}, ${lq}, ${lk}) for ` +
    `${sequenceLabel.textContent.toLowerCase()} ${res.sequence_index}`);
  if (res.generation) parts.push(generated(res.generation));
  if (res.attention_path === "output_attentions") parts.push("the model's own output_attentions");
  // A stream's start line knows no time yet (compute_ms comes with its end).
  parts.push(res.computing ? `${res.device}, computing…` : `${res.device}, ${res.compute_ms.toFixed(1)} ms`);
  return parts.join(" · ");
}

// "8 tokens generated (greedy) in 0.7 s", for the summaries.
function generated(g) {
  const how = g.temperature > 0 ? `sampled at temperature ${g.temperature}, seed ${g.seed}` : "greedy";
  return `${g.tokens.length} tokens generated (${how}) in ${(g.compute_ms / 1000).toFixed(1)} s`;
}

export function noteFor(res) {
  const what = sequenceLabel.textContent;
  const length = queryTokens(res).length;
  const parts = [];
  if (res.generation) {
    const g = res.generation;
    parts.push(`${what} ${res.sequence_index}: ${g.prompt_length} prompt tokens + ` +
      `${g.tokens.length} generated, run alone in one causal pass`);
  } else if (res.block === "cross") {
    parts.push(`${what} ${res.sequence_index}: ${length} target tokens over ` +
      `${keyTokens(res).length} text tokens, run alone (no padding)`);
  } else if (familySpec(res).targets) {
    const side = res.block === "decoder" ? "target" : "text";
    parts.push(`${what} ${res.sequence_index}: ${length} ${side} tokens, run alone (no padding)`);
  } else {
    parts.push(`${what} ${res.sequence_index}: ${length} tokens, run alone (no padding)`);
  }
  if (causalBlock(res)) {
    parts.push("causal: each token attends to itself and earlier tokens only (the upper " +
      "triangle is empty)");
  }
  if (res.block === "cross") parts.push("rows are target tokens, columns the encoder's tokens");
  if (res.hidden_special_tokens && res.special_share === undefined) {
    parts.push("special tokens hidden: each row is renormalised over the remaining tokens " +
      "so it sums to 1 again");
  } else if (res.hidden_special_tokens) {
    parts.push("special tokens hidden: each row is renormalised over the remaining tokens " +
      `so it sums to 1 again (they took ${(100 * res.special_share).toFixed(1)}% of each row ` +
      "on average, over all layers and heads)");
  }
  if (res.downsample) {
    const [f, kf] = poolFactors(res.downsample);
    const length = Math.max(queryTokens(res).length, keyTokens(res).length);
    // The sides the other maps are fetched at (MAP_SIDES): the note says which are whole.
    const full = Object.entries(MAP_NAMES).filter(([side]) => length <= MAP_SIDES[side])
      .map(([, name]) => name);
    const pooledToo = Object.entries(MAP_NAMES).filter(([side]) => length > MAP_SIDES[side])
      .map(([side, name]) => `${name} to ${MAP_SIDES[side]}`);
    parts.push(`thumbnails pooled to blocks of ${f} × ${kf} tokens (block max)` +
      (full.length ? `; ${joined(full)} at full resolution` : "") +
      (pooledToo.length ? `; ${joined(pooledToo)} rows and columns at most, pooled the same way` : ""));
  }
  if (res.average_downsample) {
    const [f, kf] = poolFactors(res.average_downsample);
    parts.push(res.average_downsample.method === "mean"
      ? `the layer average is pooled to blocks of ${f} × ${kf} tokens (each block's mean: ` +
        "summed block by block, no full-size sum)"
      : `the averages and rollout are pooled to blocks of ${f} × ${kf} tokens (block max)`);
  }
  const groups = kvGroups(res);
  if (groups) {
    parts.push(`grouped-query attention: each ${groups.per} consecutive query heads read one ` +
      "key/value head");
  }
  return `${parts.join(" · ")}. Rows are queries, columns keys.`;
}

// The summary line of the token explorer: the model, what was generated, the rows' shape.
export function describeQuery(res, q) {
  const grouped = groupedQueryText(res.num_heads, res.num_key_value_heads);
  const parts = [
    `${res.model} (${res.family}, ${res.architecture}): ${res.num_layers} layers × ` +
      `${res.num_heads} heads${grouped ? `, ${grouped}` : ""}, d_model ${res.d_model}`,
  ];
  if (familySpec(res).blocks.length > 1) parts.push(BLOCK_WORDS[res.block]);
  const [N, H, Lk] = shapeOf(res.query_attentions);
  parts.push(`query_attentions (N, H, L_k) = (${N}, ${H}, ${Lk}): token ${q}'s row in every ` +
    "layer and head");
  if (res.generation) parts.push(generated(res.generation));
  if (res.attention_path === "output_attentions") parts.push("the model's own output_attentions");
  parts.push(`${res.device}, ${res.compute_ms.toFixed(1)} ms`);
  return parts.join(" · ");
}

export function noteForQuery(res) {
  const what = sequenceLabel.textContent;
  const length = queryTokens(res).length;
  const parts = [];
  if (res.generation) {
    const g = res.generation;
    parts.push(`${what} ${res.sequence_index}: ${g.prompt_length} prompt tokens + ` +
      `${g.tokens.length} generated, run alone in one causal pass`);
  } else if (familySpec(res).targets) {
    const side = res.block === "encoder" ? "text" : "target";
    parts.push(`${what} ${res.sequence_index}: ${length} ${side} tokens, run alone (no padding)`);
  } else {
    parts.push(`${what} ${res.sequence_index}: ${length} tokens, run alone (no padding)`);
  }
  parts.push("every token is shown here, special ones included (greyed)");
  if (causalBlock(res)) {
    parts.push("causal: a token's row covers itself and the tokens before it");
  }
  return `${parts.join(" · ")}.`;
}

// A hint above a figure, as HTML: it wraps on a phone, where a long figure title would
// be cut off at the figure's edge.
export function addHint(container, text) {
  return paragraph(container, "hint figure-hint", text);
}

// ---------------------------------------------------------------------------
// The method (#method): what every map holds (the API's `method`).

// What the page says of each method: the server's method registry
// (attnviz.pretrained.methods, through models-config), not repeated here.
const METHOD_NOTES = Object.fromEntries(CONFIG.method_specs.map((m) => [m.name, m.note]));

// What a gradient method explained (the response's `target`), for the figures' hints.
export function targetText(res) {
  const t = res.target;
  if (!t) return "";
  const at = queryTokens(res)[t.index];
  const where = at === undefined ? `position ${t.index}` : `“${displayToken(at)}” (${t.index})`;
  const value = t.value.toPrecision(4);
  return t.kind === "logit"
    ? `Target: the logit of “${displayToken(t.token)}” as the next token after ${where}, ${value}.`
    : `Target: the output at ${where} along the sentence embedding, ${value}.`;
}

// The note under the controls, and the options that assume weights disabled.
export function showMethod() {
  methodNote.hidden = !otherMethod();
  methodNote.textContent = METHOD_NOTES[methodSelect.value] || "";
  targetControl.hidden = !gradientMethod();
  const off = ablatedHeads().length > 0;
  for (const box of [hideSpecial, mergeWords]) {
    box.disabled = otherMethod() || off;
    box.title = otherMethod() ? "For the attention weights only (see Method)"
      : (off ? "Not with heads off (its positions count every token)" : "");
  }
  restoreHeads.hidden = !off;
}

// ---------------------------------------------------------------------------
// Heads off (#ablate).

// The ablation's effect, from the response's `ablation`, in #ablation-note.
export function showAblation(res) {
  const a = res && res.ablation;
  if (!a) {
    ablationNote.hidden = true;
    ablationNote.textContent = "";
    return;
  }
  const heads = a.heads.map(([l, h]) => `L${l}.H${h}`).join(", ");
  const tokens = displayTokens(a.tokens || queryTokens(res)); // an encoder-decoder's targets
  const worst = (values) => values.reduce((best, v, i) => (v > values[best] ? i : best), 0);
  let text = `Heads off: ${heads}. `;
  if (a.kl) {
    const changed = a.top_before.filter((row, i) => row[0].id !== a.top_after[i][0].id).length;
    const mean = a.kl.reduce((x, y) => x + y, 0) / a.kl.length;
    const i = worst(a.kl);
    text += `The most likely next token changes at ${changed} of ${a.kl.length} positions; ` +
      `the next-token distribution moves by ${mean.toFixed(4)} nats on average (KL), most ` +
      `after “${tokens[i]}” (${a.kl[i].toFixed(4)}: “${displayToken(a.top_before[i][0].token)}” ` +
      `${(100 * a.top_before[i][0].probability).toFixed(1)}% before, ` +
      `“${displayToken(a.top_after[i][0].token)}” ` +
      `${(100 * a.top_after[i][0].probability).toFixed(1)}% after).`;
    ablationNote.dataset.changed = String(changed);
  } else if (a.hidden_change) {
    const mean = a.hidden_change.reduce((x, y) => x + y, 0) / a.hidden_change.length;
    const i = worst(a.hidden_change);
    text += `The last hidden state moves by ${(100 * mean).toFixed(2)}% on average ` +
      `(‖h′ − h‖ / ‖h‖), most at “${tokens[i]}” (${(100 * a.hidden_change[i]).toFixed(2)}%).`;
  }
  ablationNote.textContent = text;
  ablationNote.hidden = false;
}

export const SCALE_NOTES = {
  shared: "coloured on one scale, the largest weight of all heads",
  head: "each scaled to its own maximum",
  row: "each query row scaled to its own maximum",
  log: "coloured on a log scale of the weight",
};
