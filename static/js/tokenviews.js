// Token-centred views shared by both pages, drawn as plain SVG and HTML (no Plotly):
//   lineView:   BertViz's head view: the queries in a left column, the keys in a right
//               one, a line from each selected query to every key, as thick and as opaque
//               as its weight, one colour per head; heads can be switched off.
//   neuronView: BertViz's neuron view: for one head and one query, the query vector q,
//               each key vector k, their elementwise product q∘k, the score q·k, the
//               scaled score (× the model's scaling, 1/√d_k in the paper) and the
//               softmax weight (Vaswani et al. 2017, eq. 1; the seeds' tutorial 001).
// Every line and row carries its numbers in data-* attributes (tests read them).

import { additive } from "./tokens.js";

const SVG = "http://www.w3.org/2000/svg";
// D3's category10, as Plotly's default trace colours: head h gets HEAD_COLORS[h % 10].
export const HEAD_COLORS = [
  "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
  "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
];
const ROW_PX = 20; // one token per row in each column
const MAX_LINE_PX = 6; // the stroke of a weight of 1
const ALL_LINES_MAX = 40; // with nothing selected, every query's lines up to this length

function svgElement(name, attributes) {
  const element = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, String(value));
  return element;
}

// The head toggles: one coloured checkbox per head; `visible` (a Set) is changed in place.
function headToggles(container, count, visible, onChange) {
  const box = document.createElement("div");
  box.className = "head-toggles";
  box.setAttribute("role", "group");
  box.setAttribute("aria-label", "Heads shown");
  for (let h = 0; h < count; h += 1) {
    const label = document.createElement("label");
    label.className = "head-toggle";
    label.style.setProperty("--head-color", HEAD_COLORS[h % HEAD_COLORS.length]);
    const input = document.createElement("input");
    input.type = "checkbox";
    input.checked = visible.has(h);
    input.dataset.head = String(h);
    input.addEventListener("change", () => {
      if (input.checked) visible.add(h);
      else visible.delete(h);
      onChange();
    });
    label.append(input, ` head ${h}`);
    box.append(label);
  }
  container.append(box);
}

// The line view. options:
//   queries, keys (token labels, plain text), maps (H x L_q x L_k weights, null = masked),
//   selected (Set of query positions; empty: every query's lines up to ALL_LINES_MAX
//   tokens), visible (Set of the heads drawn, kept across redraws), onSelect(q, add).
// Returns the <svg>.
export function lineView(container, options) {
  const { queries, keys, maps, selected, visible, onSelect } = options;
  container.replaceChildren();
  headToggles(container, maps.length, visible, () => lineView(container, options));
  const rows = Math.max(queries.length, keys.length);
  const width = Math.min(Math.max(container.clientWidth || 640, 360), 760);
  const labelWidth = 150;
  const height = rows * ROW_PX + 10;
  const svg = svgElement("svg", {
    class: "line-view", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": "Lines from the selected query tokens (left) to every key token (right)",
  });
  const left = labelWidth;
  const right = width - labelWidth;
  const y = (i) => 5 + i * ROW_PX + ROW_PX / 2;
  const drawn = selected.size ? [...selected].filter((q) => q < queries.length)
    : (queries.length <= ALL_LINES_MAX ? queries.map((_, q) => q) : []);
  const lines = svgElement("g", { class: "lines" });
  // Weights are at most 1; other methods' values (norms) are drawn relative to the largest.
  let unit = 1;
  for (const h of visible) {
    for (const q of drawn) for (const w of (maps[h] && maps[h][q]) || []) unit = Math.max(unit, w ?? 0);
  }
  for (const h of [...visible].sort((a, b) => a - b)) {
    const map = maps[h];
    if (!map) continue;
    for (const q of drawn) {
      const row = map[q] || [];
      row.forEach((w, k) => {
        if (w === null || w <= 0) return;
        lines.append(svgElement("line", {
          x1: left, y1: y(q), x2: right, y2: y(k),
          stroke: HEAD_COLORS[h % HEAD_COLORS.length],
          "stroke-width": Math.max(0.5, (w / unit) * MAX_LINE_PX),
          "stroke-opacity": Math.min(1, 0.15 + w / unit),
          "data-head": h, "data-query": q, "data-key": k, "data-weight": w,
        }));
      });
    }
  }
  svg.append(lines);
  const column = (tokens, x, anchor, side) => {
    const group = svgElement("g", { class: `line-tokens ${side}` });
    tokens.forEach((token, i) => {
      const text = svgElement("text", {
        x, y: y(i), "text-anchor": anchor, "dominant-baseline": "middle",
        class: side === "queries" && selected.has(i) ? "line-token selected" : "line-token",
        "data-position": i,
      });
      text.textContent = String(token);
      if (side === "queries") {
        text.setAttribute("tabindex", "0");
        text.setAttribute("role", "button");
        text.addEventListener("click", (event) => onSelect(i, additive(event)));
        text.addEventListener("keydown", (event) => {
          if (event.key === "Enter" || event.key === " ") {
            event.preventDefault();
            onSelect(i, additive(event));
          }
        });
      }
      group.append(text);
    });
    svg.append(group);
  };
  column(queries, left - 8, "end", "queries");
  column(keys, right + 8, "start", "keys");
  container.append(svg);
  if (!drawn.length) {
    const hint = document.createElement("p");
    hint.className = "hint";
    hint.textContent = "Select a query token on the left to draw its lines.";
    container.append(hint);
  }
  return svg;
}

// Diverging colour of x in [-1, 1] (ColorBrewer RdBu, as the signed heatmaps).
function signedColor(x) {
  const t = Math.max(-1, Math.min(1, x));
  const [r0, g0, b0] = t < 0 ? [33, 102, 172] : [178, 24, 43];
  const a = Math.abs(t);
  const mix = (c) => Math.round(247 + (c - 247) * a);
  return `rgb(${mix(r0)}, ${mix(g0)}, ${mix(b0)})`;
}

function vectorCells(row, values, top, name) {
  for (const [d, v] of values.entries()) {
    const cell = document.createElement("td");
    cell.className = "vec";
    cell.style.background = signedColor(v / top);
    cell.title = `${name}[${d}] = ${v.toFixed(4)}`;
    row.append(cell);
  }
}

function numberCell(row, value, digits = 4) {
  const cell = document.createElement("td");
  cell.className = "num";
  cell.textContent = value === null ? "masked" : value.toFixed(digits);
  row.append(cell);
}

// The neuron view of one head and one query. options:
//   queryLabel, keyLabels (plain text), query (d_k), keys (L_k x d_k), scaling,
//   masked (L_k booleans), weights (L_k), title.
// Each key's row holds data-score (q·k), data-scaled and data-weight; the q row holds
// the vector in data-vector, each key row its k in data-vector.
export function neuronView(container, options) {
  const { query, keys, scaling, masked, weights } = options;
  container.replaceChildren();
  const title = document.createElement("p");
  title.className = "hint neuron-title";
  title.textContent = options.title;
  container.append(title);
  let top = 1e-12;
  for (const v of query) top = Math.max(top, Math.abs(v));
  for (const k of keys) for (const v of k) top = Math.max(top, Math.abs(v));
  let productTop = 1e-12;
  const products = keys.map((k) => k.map((v, d) => v * query[d]));
  for (const p of products) for (const v of p) productTop = Math.max(productTop, Math.abs(v));
  const table = document.createElement("table");
  table.className = "neuron-view";
  const dk = query.length;
  const head = table.createTHead().insertRow();
  for (const [text, span] of [["key", 1], ["k (key vector)", dk], ["q ∘ k", dk], ["q · k", 1],
    [`× ${scaling.toPrecision(4)}`, 1], ["softmax", 1]]) {
    const th = document.createElement("th");
    th.textContent = text;
    th.colSpan = span;
    head.append(th);
  }
  const body = table.createTBody();
  const qRow = body.insertRow();
  qRow.className = "neuron-query";
  qRow.dataset.vector = JSON.stringify(query);
  const qLabel = document.createElement("th");
  qLabel.textContent = `q: ${options.queryLabel}`;
  qRow.append(qLabel);
  vectorCells(qRow, query, top, "q");
  const spacer = document.createElement("td");
  spacer.colSpan = dk + 3;
  qRow.append(spacer);
  keys.forEach((k, j) => {
    const row = body.insertRow();
    row.className = masked[j] ? "neuron-key masked" : "neuron-key";
    const score = k.reduce((sum, v, d) => sum + v * query[d], 0);
    row.dataset.vector = JSON.stringify(k);
    row.dataset.score = String(score);
    row.dataset.scaled = String(score * scaling);
    row.dataset.weight = String(weights[j]);
    const label = document.createElement("th");
    label.textContent = options.keyLabels[j];
    row.append(label);
    vectorCells(row, k, top, "k");
    vectorCells(row, products[j], productTop, "q∘k");
    numberCell(row, score, 3);
    numberCell(row, score * scaling, 3);
    numberCell(row, masked[j] ? null : weights[j], 3);
  });
  const scroller = document.createElement("div");
  scroller.className = "neuron-scroll";
  scroller.append(table);
  container.append(scroller);
  return table;
}
