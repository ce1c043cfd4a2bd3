// The token explorer (Generation for decoders): the tokens as buttons; a click asks
// for that query's row in every layer and head (query_index) and, for decoders, the
// next-token candidates at every position (top_k).
import { busy, paragraph, writeLinkSettings } from "../../api.js";
import { addPlot, clearPlots, heatmapFigure, tokenHover } from "../../heatmap.js";
import { displayToken, displayTokens } from "../../lib/display.js";
import { causalBlock, familySpec, modelInfo } from "../catalog.js";
import { CONFIG, displayNote, summary } from "../elements.js";
import { fillTargets, rememberSpecials, valueName, viewRequest } from "../form.js";
import { requestAttention } from "../listing.js";
import { describeGrid } from "../heads.js";
import { addHint, describeQuery, noteForQuery, targetText } from "../notes.js";
import { methodRow } from "../methods.js";
import { headName, keyTokens, queryTokens } from "../response.js";
import { state } from "../state.js";
import { overview } from "../stream.js";

const TOP_K = Math.min(5, CONFIG.max_top_k); // next-token candidates shown per position

// The request of query position q: the overview's input with every token shown
// (query_index counts them all), one pooled head only (the maps are not drawn here).
export function queryRequest(q) {
  const decoder = familySpec(modelInfo(state.request.model)).generates;
  return viewRequest({
    hide_special_tokens: false, merge_words: false, query_index: q, layer_index: 0, head_index: 0,
    display_size: 8, top_k: decoder ? TOP_K : 0,
  });
}

async function queryResponse(q) {
  const body = queryRequest(q);
  const key = JSON.stringify(body);
  if (!state.queries.has(key)) {
    const res = await requestAttention(body);
    if (res === null) return null;
    state.queries.set(key, res);
    rememberSpecials(res);
  }
  window.attnvizModels.lastQuery = state.queries.get(key);
  return state.queries.get(key);
}

// The position explored first: the prompt's last token (its row chose the first
// generated token), else the first token that is not special.
// A decoder without generation: its last token (the one whose row predicts what comes next).
function defaultQuery(res) {
  if (res.generation) return res.generation.prompt_length - 1;
  if (familySpec(res).generates) return res.tokens[0].length - 1;
  const mask = res.special_tokens_mask[0];
  const first = mask.findIndex((special) => !special);
  return first < 0 ? 0 : first;
}

function chipText(token) {
  const fragment = document.createDocumentFragment();
  const shown = displayToken(token);
  const match = /^([␣↵⇥]+)(.*)$/su.exec(shown);
  if (match && match[2]) {
    const lead = document.createElement("span");
    lead.className = "chip-space";
    lead.textContent = match[1];
    fragment.append(lead, match[2]);
  } else {
    fragment.append(shown);
  }
  return fragment;
}

function drawChips(section, res, selected) {
  const chips = section.querySelector(".token-chips");
  const tokens = queryTokens(res);
  const promptLength = res.generation ? res.generation.prompt_length : tokens.length;
  const mask = res.special_tokens_mask[0];
  const buttons = tokens.map((token, i) => {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "chip";
    if (i >= promptLength) button.classList.add("generated");
    if (mask[i]) button.classList.add("special");
    button.dataset.index = String(i);
    button.setAttribute("aria-pressed", String(i === selected));
    const role = i >= promptLength ? "generated" : (res.generation ? "prompt" : "input");
    button.title = `token ${i} (${role}${mask[i] ? ", special" : ""}): ${token}`;
    button.append(chipText(token));
    button.addEventListener("click", () => selectQuery(i));
    return button;
  });
  chips.replaceChildren(...buttons);
  chips.dataset.count = String(tokens.length);
  chips.dataset.promptLength = String(promptLength);
}

function markChip(section, q) {
  for (const chip of section.querySelectorAll(".token-chips .chip")) {
    chip.setAttribute("aria-pressed", String(Number(chip.dataset.index) === q));
  }
}

// The rows of query q in every layer and head: (N * H) rows over the keys it may see.
function rowsFigure(res, q) {
  const N = res.query_attentions.length;
  const H = res.num_heads;
  const causal = causalBlock(res);
  const keys = keyTokens(res);
  const width = causal ? q + 1 : keys.length;
  const z = [];
  const rowLabels = [];
  const rowHover = [];
  for (let l = 0; l < N; l += 1) {
    for (let h = 0; h < H; h += 1) {
      z.push(res.query_attentions[l][h].slice(0, width));
      rowLabels.push(`L${l} H${h}`);
      rowHover.push(headName(res, l, h));
    }
  }
  const colLabels = displayTokens(keys.slice(0, width));
  const token = displayToken(queryTokens(res)[q]);
  const figure = heatmapFigure({
    z, rowLabels, colLabels, rowHover, colHover: tokenHover(colLabels),
    title: `Row of token ${q} “${token}” in every layer and head`,
    yTitle: "Layer, head", xTitle: causal ? "Key (earlier tokens)" : "Key", zmin: 0,
    valueName: valueName(),
  });
  // A faint line between layers.
  figure.layout.shapes = Array.from({ length: N - 1 }, (_, l) => ({
    type: "line", xref: "paper", x0: 0, x1: 1, y0: (l + 1) * H - 0.5, y1: (l + 1) * H - 0.5,
    line: { color: "rgba(128, 128, 128, 0.35)", width: 0.5 },
  }));
  figure.layout.margin = { ...figure.layout.margin, l: 72 };
  return { figure, rows: N * H, cols: width };
}

function nextTokensTable(container, res, q) {
  container.replaceChildren();
  const candidates = res.next_tokens && res.next_tokens[q];
  container.parentElement.classList.toggle("no-next", !candidates);
  if (!candidates) return;
  const tokens = queryTokens(res);
  const following = q + 1 < tokens.length ? res.input_ids[0][q + 1] : null;
  const generated = res.generation && q + 1 >= res.generation.prompt_length;
  const heading = document.createElement("h2");
  heading.textContent = `Next token after “${displayToken(tokens[q])}”`;
  const table = document.createElement("table");
  table.className = "data-table next-table";
  const head = table.createTHead().insertRow();
  for (const text of ["#", "token", "probability"]) {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = text;
    head.append(th);
  }
  const tbody = table.createTBody();
  candidates.forEach((c, rank) => {
    const row = tbody.insertRow();
    if (c.id === following) row.className = "current";
    row.insertCell().textContent = String(rank + 1);
    const tokenCell = row.insertCell();
    tokenCell.className = "token-cell";
    tokenCell.textContent = displayToken(c.token);
    tokenCell.title = `id ${c.id}`;
    const cell = row.insertCell();
    cell.className = "prob-cell";
    const bar = document.createElement("span");
    bar.className = "prob-bar";
    bar.style.width = `${Math.max(1, Math.round(100 * c.probability))}%`;
    const value = document.createElement("span");
    value.className = "prob-value";
    value.textContent = `${(100 * c.probability).toFixed(1)}%`;
    cell.append(bar, value);
  });
  let note;
  if (following === null) {
    note = "What the model would write after the last token.";
  } else if (!candidates.some((c) => c.id === following)) {
    note = `The token that followed, “${displayToken(tokens[q + 1])}”, is not among the top ${TOP_K}.`;
  } else {
    note = generated
      ? "Highlighted: the token that was generated next."
      : "Highlighted: the token that follows in the prompt.";
  }
  container.append(heading, table);
  paragraph(container, "hint", note);
}

async function drawQuery(section, res, q) {
  const rowsBox = section.querySelector(".query-rows");
  const { figure, rows, cols } = rowsFigure(res, q);
  // About 3.6 px a row (270 rows for SmolLM2), the figure's own height.
  const height = Math.round(Math.max(360, Math.min(1150, rows * 3.6 + 150)));
  figure.layout.height = height;
  clearPlots(rowsBox);
  const div = addPlot(rowsBox, figure, "plot rows-plot");
  div.style.height = `${height}px`;
  div.id = "query-rows";
  div.dataset.query = String(q);
  div.dataset.rows = String(rows);
  div.dataset.cols = String(cols);
  const heads = [];
  res.query_attentions.forEach((layer, n) => layer.forEach((row, h) => {
    heads.push([`L${n}.H${h}`, [row.slice(0, cols)]]);
  }));
  describeGrid(div, res, heads, `Row of token ${q} in every layer and head`, { query: q });
  nextTokensTable(section.querySelector(".next-tokens"), res, q);
  const drawn = [div.drawn];
  const methodRowOf = methodRow(res);
  if (methodRowOf) {
    // The token's row of the method's map (gradient rollout: its own residual left out).
    addHint(rowsBox, `${targetText(res)} ${methodRowOf.hint(q)}`);
    const strip = heatmapFigure({
      z: [methodRowOf.values(res, q, cols)], rowLabels: [displayToken(queryTokens(res)[q])],
      colLabels: displayTokens(keyTokens(res).slice(0, cols)),
      title: methodRowOf.title(q), zmin: 0,
      xTitle: "Key", yTitle: "Query", ...methodRowOf.format,
    });
    strip.layout.height = 240;
    const plot = addPlot(rowsBox, strip, "plot rollout-row");
    plot.dataset.map = methodRowOf.figure;
    drawn.push(plot.drawn);
  }
  await Promise.all(drawn);
}

// The token explorer of the selected input, with query q (default: defaultQuery).
export async function renderGeneration(section, ticket) {
  const queryTicket = state.queryTicket; // a token chosen meanwhile draws instead
  const current = () => ticket === state.ticket && queryTicket === state.queryTicket;
  let q = state.queryIndex;
  // Without a chosen position, first the overview (which knows the prompt's length).
  if (q === null) {
    const res = await overview();
    if (res === null || !current()) return false;
    const full = res.hidden_special_tokens ? null : res;
    q = full ? defaultQuery(full) : null;
    // A link's token, where the input has it.
    const linked = Number(state.linked.query);
    delete state.linked.query;
    if (full && Number.isInteger(linked) && linked < queryTokens(full).length) q = linked;
    if (q === null) {
      // The overview hid the special tokens: positions differ; ask for the last one's row.
      q = res.generation ? res.generation.prompt_length - 1 : 0;
    }
    state.queryIndex = q;
  }
  const res = await queryResponse(q);
  if (res === null || !current()) return false;
  fillTargets(res);
  summary.textContent = describeQuery(res, q);
  displayNote.textContent = noteForQuery(res);
  const decoder = familySpec(res).generates;
  const intro = section.querySelector(".generation-intro");
  const tokens = queryTokens(res);
  if (res.generation) {
    const g = res.generation;
    intro.textContent = `The prompt (${g.prompt_length} tokens${state.request.chat ? ", in the chat template" : ""}) ` +
      `and the ${g.tokens.length} generated tokens (highlighted); special tokens are grey. ` +
      "Choose a token to see its row in every layer and head: what it attended to, and " +
      `the model's top ${TOP_K} candidates for the token after it.`;
  } else if (res.block === "cross") {
    intro.textContent = `The decoder's ${tokens.length} target tokens (the queries of ` +
      "cross-attention); special tokens are grey. Choose one to see its row in every layer " +
      "and head: which of the text's tokens it attended to.";
  } else {
    intro.textContent = `The ${tokens.length} tokens; special tokens are grey. Choose one to ` +
      "see its row in every layer and head: what it attended to." +
      (decoder ? ` With the model's top ${TOP_K} candidates for the token after it.` : "");
  }
  section.querySelector(".causal-note").hidden = !decoder;
  drawChips(section, res, q);
  await drawQuery(section, res, q);
  section.querySelector(".token-chips").dataset.query = String(q);
  return true;
}

// A chip was chosen: only the detail is drawn again (the chips, and the focus, stay).
export async function selectQuery(q) {
  const section = document.getElementById("view-generation");
  const ticket = (state.queryTicket += 1);
  state.queryIndex = q;
  markChip(section, q);
  section.dataset.drawn = "false";
  const res = await busy(() => queryResponse(q), "Computing this token's rows…");
  if (res === null || ticket !== state.queryTicket || state.view !== "generation") return;
  writeLinkSettings(state.view); // the token picked travels in the link
  summary.textContent = describeQuery(res, q);
  await drawQuery(section, res, q);
  section.querySelector(".token-chips").dataset.query = String(q);
  if (ticket === state.queryTicket) section.dataset.drawn = "true";
}
