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

export function family(model) {
  return (model && model.family) || "encoder";
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
