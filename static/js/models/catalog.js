// The models on offer (GET /api/v1/models, kept in state.models): a model's entry, its
// family, and what the page says of it.
import { modelSelect } from "./elements.js";
import { state } from "./state.js";

export function modelInfo(name) {
  return state.models.find((m) => m.name === name) || null;
}

export function selectedModel() {
  return modelInfo(modelSelect.value);
}

// A model's family as the server describes it (family_spec, in GET /api/v1/models and in
// every answer: attnviz.pretrained.families): its blocks, what it reads and gives. The one
// place the page learns a family; nothing compares a family's name. A model still loading
// has none yet: NO_FAMILY, which reads nothing beyond texts.
const NO_FAMILY = Object.freeze({
  name: null, blocks: [], text_pairs: false, targets: false, generates: false,
  causal_blocks: [], input_label: "text", gradient_target: "embedding",
});

export function familySpec(of) {
  return (of && of.family_spec) || NO_FAMILY;
}

// Whether an answer's maps are causal (its block is one where no query sees a later key).
export function causalBlock(res) {
  return familySpec(res).causal_blocks.includes(res.block);
}

function formatCount(n) {
  if (n >= 1e9) return `${(n / 1e9).toFixed(2)}B`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
  return n.toLocaleString();
}

// "3 key/value heads (grouped-query: 3 query heads each)", or null without grouping.
export function groupedQueryText(numHeads, numKv) {
  if (!numKv || numKv >= numHeads) return null;
  const per = numHeads / numKv;
  if (numKv === 1) return `1 key/value head (multi-query: all ${numHeads} query heads share it)`;
  return `${numKv} key/value heads (grouped-query: ${per} query heads each)`;
}

export function descriptionOf(m) {
  if (!m) return "";
  if (m.state === "loading") return `Loading… (${m.source}); it can be chosen once it is ready.`;
  if (m.state === "failed") return `Failed to load: ${m.error || "no reason given"} (${m.source})`;
  const parts = [
    `${m.family}, ${m.architecture}`,
    `${m.num_layers} layers × ${m.num_heads} heads`,
  ];
  const grouped = groupedQueryText(m.num_heads, m.num_key_value_heads);
  if (grouped) parts.push(grouped);
  parts.push(`d_model ${m.d_model}`, `${formatCount(m.num_parameters)} parameters`);
  parts.push(m.max_tokens ? `up to ${m.max_tokens.toLocaleString()} tokens` : "no position limit");
  if (m.chat_template) parts.push("chat template");
  return `${parts.join(" · ")}; from ${m.source}`;
}

export function optionText(m) {
  if (m.state === "loading") return `${m.name} (loading…)`;
  if (m.state === "failed") return `${m.name} (failed)`;
  return m.name;
}
