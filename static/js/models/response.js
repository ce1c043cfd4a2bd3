// Reading a response of the attention API: its query and key tokens, its grouped-query
// heads and their names, and the tokens a pooled map's blocks cover.
import { tokenHover } from "../heatmap.js";
import { displayTokens } from "../lib/display.js";

export function queryTokens(res) {
  return res.tokens[0];
}

export function keyTokens(res) {
  return (res.key_tokens || res.tokens)[0];
}

export function isSelfAttention(res) {
  return !res.key_tokens;
}

// ---------------------------------------------------------------------------
// Grouped-query attention: query head h reads key/value head floor(h / (H / H_kv)).

export function kvGroups(res) {
  const kv = res.num_key_value_heads || res.num_heads;
  return kv < res.num_heads ? { kv, per: res.num_heads / kv } : null;
}

export function headName(res, l, h) {
  const groups = kvGroups(res);
  if (!groups) return `layer ${l}, head ${h}`;
  const g = Math.floor(h / groups.per);
  const first = g * groups.per;
  return `layer ${l}, head ${h} · key/value head ${g} (shared by heads ${first}–${first + groups.per - 1})`;
}

export function headTitle(res, l, h) {
  const groups = kvGroups(res);
  return groups ? `Layer ${l}, head ${h} · kv head ${Math.floor(h / groups.per)}` : `Layer ${l}, head ${h}`;
}

// ---------------------------------------------------------------------------
// Pooled maps.

// [tokens per row, tokens per column] of a map pooled as `downsample` says (a response's
// `downsample`, absent or null when it is not pooled).
export function poolFactors(downsample) {
  if (!downsample) return [1, 1];
  return [downsample.factor, downsample.key_factor ?? downsample.factor];
}

// The labels of a map pooled by `factor` ("the…mat"), or the tokens themselves.
export function blockLabels(tokens, factor) {
  if (factor <= 1) return tokens;
  const blocks = [];
  for (let i = 0; i < tokens.length; i += factor) {
    const block = tokens.slice(i, i + factor);
    blocks.push(block.length === 1 ? block[0] : `${block[0]}…${block[block.length - 1]}`);
  }
  return blocks;
}

// Hover text of a map's rows (queries) or columns (keys): the tokens, or the tokens each
// pooled block covers ("tokens 0–3: [CLS]…sat"); pooled as the overview's thumbnails unless
// `factors` ([per row, per column]) says otherwise.
export function thumbnailHover(res, axis = "query", factors = poolFactors(res.downsample)) {
  const tokens = displayTokens(axis === "key" ? keyTokens(res) : queryTokens(res));
  const f = axis === "key" ? factors[1] : factors[0];
  if (f === 1) return tokenHover(tokens);
  return tokenHover(blockLabels(tokens, f), f, tokens.length);
}
