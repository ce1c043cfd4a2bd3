// The head atlas on /models (issue 33): what every head of a model does, scored over a
// corpus by POST /api/v1/models/heads/stream (attnviz.pretrained.heads): one layers x
// heads map per score, a sortable table of the top heads, a click on a head opens its
// map on the user's own input (the caller's onHead), and the table as CSV or JSON.

import { download } from "./lib/downloads.js";
import { paragraph } from "./lib/form.js";
import { readLines } from "./lib/ndjson.js";
import { errorText } from "./lib/requests.js";
import { addPlot, clearPlots, heatmapFigure, maxOf } from "./heatmap.js";

export const ATLAS_URL = "/api/v1/models/heads/stream";

// The scores in the order they are shown, with a short title and what "high" means.
export const SCORE_TITLES = {
  previous_token: "Previous token: A[i, i−1]",
  induction: "Induction: A[i, i−R+1] on repeats",
  duplicate_token: "Duplicate token: A[i, i−R] on repeats",
  first_token: "First token (sink): A[i, 0]",
  self: "Self: A[i, i]",
  entropy: "Entropy of the row (nats)", // shown in bits (shownAtlas)
};
const TOP_ROWS = 10; // heads listed in the table

// POST `body` ({model, texts?, device}) to the atlas stream; `onProgress(done, total)` after
// each forward pass. Resolves to the atlas (the end line), rejects with an Error whose
// message is the API's.
export async function fetchAtlas(body, onProgress, signal) {
  const response = await fetch(ATLAS_URL, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
    signal,
  });
  if (!response.ok) {
    throw new Error(errorText(await response.json().catch(() => null), response.status));
  }
  const atlas = await readLines(response, (message) => {
    if (message.type === "progress") onProgress(message.done, message.total);
    else if (message.type === "error") throw new Error(message.detail);
    return message.type === "end" ? message : undefined;
  });
  if (atlas === undefined) throw new Error("The atlas stream ended without its result; try again.");
  return atlas;
}

// One row per head: {layer, head, <score>: value, ...}, layer-major.
export function atlasRows(atlas) {
  const rows = [];
  for (let l = 0; l < atlas.num_layers; l += 1) {
    for (let h = 0; h < atlas.num_heads; h += 1) {
      const row = { layer: l, head: h };
      for (const name of Object.keys(atlas.scores)) row[name] = atlas.scores[name][l][h];
      rows.push(row);
    }
  }
  return rows;
}

// The table as CSV text (a header line: layer, head, then the scores).
export function atlasCsv(atlas) {
  const names = Object.keys(atlas.scores);
  const lines = [["layer", "head", ...names].join(",")];
  for (const row of atlasRows(atlas)) {
    lines.push([row.layer, row.head, ...names.map((n) => String(row[n]))].join(","));
  }
  return `${lines.join("\n")}\n`;
}

// Save the atlas as <model>-head-atlas.csv or .json.
export function saveAtlas(atlas, format) {
  const name = `${atlas.model.replace(/[^\w.-]+/g, "_")}-head-atlas.${format}`;
  if (format === "csv") download(name, new Blob([atlasCsv(atlas)], { type: "text/csv" }));
  else download(name, new Blob([JSON.stringify(atlas)], { type: "application/json" }));
}

// Entropy is shown in bits on every page of AttnViz (the lessons' unit: log2 of the keys a
// uniform row spreads over); the API and the downloads keep the atlas's nats.
const NATS_PER_BIT = Math.LN2;

// `atlas` as drawn: its entropy in bits (its definition saying so), and on the user's own
// texts the scores of repeated random tokens titled as such (they are not of those texts).
export function shownAtlas(atlas) {
  const scores = { ...atlas.scores };
  const definitions = { ...atlas.definitions };
  const titles = { ...SCORE_TITLES };
  for (const [name, d] of Object.entries(atlas.definitions)) {
    if (d.unit === "nats" && scores[name]) {
      scores[name] = scores[name].map((row) => row.map((v) => v / NATS_PER_BIT));
      definitions[name] = { ...d, unit: "bits", definition: `${d.definition} Shown here in ` +
        "bits (nats ÷ ln 2; log2(i + 1) at most), as the lessons show entropy." };
      titles[name] = titles[name].replace("(nats)", "(bits)");
    }
    if (atlas.corpus.name === "texts" && d.inputs === "repeated random tokens" && titles[name]) {
      titles[name] += " (random tokens, not your texts)";
    }
  }
  return { ...atlas, scores, definitions, titles };
}

// Draw `atlas` into `body`: a note on what it was computed on, one layers x heads map per
// score (a click calls onHead(layer, head)), the table of the top heads by a chosen score,
// and the definitions. Resolves once the maps are drawn.
export async function drawAtlas(body, raw, onHead) {
  const atlas = shownAtlas(raw);
  clearPlots(body);
  const c = atlas.corpus;
  const corpus = c.name === "texts" ? "your texts" : `the shipped corpus (${c.name} v${c.version})`;
  paragraph(body, "hint atlas-note", `${atlas.model}, ${atlas.block} block: ${atlas.num_layers} ` +
    `layers × ${atlas.num_heads} heads, scored on ${corpus}: ${c.sequences} sequences, ` +
    `${c.tokens.toLocaleString()} tokens; induction and duplicate-token on ` +
    `${c.induction_sequences} sequences of ${c.repeat_length} random tokens repeated twice ` +
    `(seed ${c.seed}). ${atlas.cached ? "From the server's cache." : `Computed in ` +
    `${(atlas.compute_ms / 1000).toFixed(1)} s.`} Click a head to open its map on your input.`);
  const grid = document.createElement("div");
  grid.className = "atlas-maps";
  body.append(grid);
  const rows = Array.from({ length: atlas.num_layers }, (_, l) => `L${l}`);
  const cols = Array.from({ length: atlas.num_heads }, (_, h) => `H${h}`);
  const drawn = [];
  for (const name of Object.keys(SCORE_TITLES)) {
    const z = atlas.scores[name];
    if (!z) continue;
    const unit = atlas.definitions[name].unit;
    const figure = heatmapFigure({
      z, rowLabels: rows, colLabels: cols, title: atlas.titles[name], yTitle: "Layer",
      xTitle: "Head", zmin: 0, zmax: unit === "weight" ? Math.max(maxOf(z), 0.05) : Math.max(maxOf(z), 1e-9),
      valueName: name.replace("_", " "), rowHover: rows.map((r) => `layer ${r.slice(1)}`),
      colHover: cols.map((h) => `head ${h.slice(1)}`), textFormat: "%{z:.2f}", hoverFormat: ".3f",
    });
    figure.layout.height = Math.round(Math.max(300, 120 + atlas.num_layers * 18));
    const div = addPlot(grid, figure, "plot atlas-plot");
    div.dataset.score = name;
    div.style.height = `${figure.layout.height}px`;
    drawn.push(div.drawn.then(() => {
      div.on("plotly_click", (event) => {
        const point = event.points[0];
        onHead(Number(point.y), Number(point.x));
      });
    }));
  }
  body.append(topTable(atlas, onHead));
  const details = document.createElement("details");
  details.className = "explain atlas-definitions";
  const summary = document.createElement("summary");
  summary.textContent = "How each score is defined";
  const list = document.createElement("ul");
  for (const name of Object.keys(SCORE_TITLES)) {
    const d = atlas.definitions[name];
    if (!d) continue;
    const item = document.createElement("li");
    const label = document.createElement("b");
    label.textContent = name;
    item.append(label, ` (${d.inputs}, ${d.unit}): ${d.definition} Source: ${d.source}.`);
    list.append(item);
  }
  details.append(summary, list);
  body.append(details);
  await Promise.all(drawn);
}

let tables = 0; // the atlas tables drawn on this page (their selects' ids)

// The top heads by one score (a select), sortable by any column (click its header); a row
// click opens that head.
function topTable(atlas, onHead) {
  const box = document.createElement("div");
  box.className = "atlas-top";
  const names = Object.keys(SCORE_TITLES).filter((n) => atlas.scores[n]);
  const controls = document.createElement("div");
  controls.className = "view-controls";
  const label = document.createElement("label");
  // Two atlases on one page (two notebook widgets): each label names its own select.
  label.htmlFor = document.getElementById("atlas-score") ? `atlas-score-${(tables += 1)}`
    : "atlas-score";
  label.textContent = `Top ${TOP_ROWS} heads by`;
  const select = document.createElement("select");
  select.id = label.htmlFor;
  for (const name of names) select.append(new Option(atlas.titles[name], name));
  controls.append(label, select);
  const table = document.createElement("table");
  table.className = "data-table atlas-table";
  box.append(controls, table);
  const all = atlasRows(atlas);
  let sort = { key: names[0], descending: true };

  const render = () => {
    const top = [...all].sort((a, b) => b[select.value] - a[select.value]).slice(0, TOP_ROWS);
    top.forEach((row, i) => { row.rank = i + 1; });
    const shown = [...top].sort((a, b) => {
      const d = a[sort.key] - b[sort.key];
      return sort.descending ? -d : d;
    });
    const head = document.createElement("tr");
    for (const key of ["rank", "layer", "head", ...names]) {
      const th = document.createElement("th");
      th.scope = "col";
      th.dataset.key = key;
      th.textContent = key === "rank" || key === "layer" || key === "head" ? key : key.replace("_", " ");
      th.setAttribute("aria-sort", sort.key === key ? (sort.descending ? "descending" : "ascending") : "none");
      th.tabIndex = 0;
      th.title = "Sort by this column";
      const sortBy = () => {
        sort = { key, descending: sort.key === key ? !sort.descending : key !== "rank" && key !== "layer" && key !== "head" };
        render();
      };
      th.addEventListener("click", sortBy);
      th.addEventListener("keydown", (event) => { if (event.key === "Enter") sortBy(); });
      head.append(th);
    }
    const rows = shown.map((row) => {
      const tr = document.createElement("tr");
      tr.dataset.layer = String(row.layer);
      tr.dataset.head = String(row.head);
      tr.tabIndex = 0;
      tr.title = `Open layer ${row.layer}, head ${row.head} on your input`;
      for (const key of ["rank", "layer", "head", ...names]) {
        const td = document.createElement("td");
        td.textContent = names.includes(key) ? row[key].toFixed(3) : String(row[key]);
        if (key === select.value) td.className = "atlas-chosen";
        tr.append(td);
      }
      tr.addEventListener("click", () => onHead(row.layer, row.head));
      tr.addEventListener("keydown", (event) => { if (event.key === "Enter") onHead(row.layer, row.head); });
      return tr;
    });
    table.replaceChildren(head, ...rows);
    table.dataset.score = select.value;
  };
  select.addEventListener("change", () => {
    sort = { key: select.value, descending: true };
    render();
  });
  render();
  return box;
}
