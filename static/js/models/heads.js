// Heads by address: the enlarged head in the link (&head=18.6), the jump box (#head-jump:
// "L18.H6" enlarges layer 18's head 6, the keyboard's way to any head), the heads switched
// off (Heads off) marked on the model view's grid, and a text alternative of each map (its
// largest weights, as a table a screen reader reads).
import { writeLinkSettings } from "../api.js";
import { headJump, layerSelect, showError } from "./elements.js";
import { ablatedHeads } from "./form.js";
import { keyTokens, queryTokens } from "./response.js";
import { displayTokens } from "../lib/display.js";
import { labelNumbers } from "./numbers.js";
import { page, state } from "./state.js";

// "L18.H6", "18.6", "l18 h6", "18:6", "18/6" -> [18, 6]; anything else null.
export function parseHead(text) {
  const match = /^\s*L?\s*(\d{1,3})\s*[.:/,\s]\s*H?\s*(\d{1,3})\s*$/iu.exec(text);
  return match ? [Number(match[1]), Number(match[2])] : null;
}

// The enlarged head as the link writes it ("18.6"); null for what a view enlarges without
// it (head 0 of the selected layer).
export function headSetting() {
  const [l, h] = state.enlargedHead ?? [0, 0];
  return h === 0 && String(l) === (layerSelect.value || "0") ? null : `${l}.${h}`;
}

// The head a link named, when `res` has it (read once: later inputs start at head 0).
export function takeLinkedHead(res) {
  const head = state.linked.head ? parseHead(state.linked.head) : null;
  delete state.linked.head;
  if (!head || head[0] >= res.num_layers || head[1] >= res.num_heads) return null;
  return head;
}

// Remember head h of layer l as the enlarged one, in the link too.
export function rememberHead(l, h) {
  state.enlargedHead = [l, h];
  writeLinkSettings(state.view);
  labelNumbers();
}

// The jump box: Enter (or a change) with "L18.H6" selects layer 18 and enlarges its head 6
// in the model or layer view (another view opens the layer view); a head the model does
// not have is an error naming the box and the model's heads. The link and the head's
// download name the chosen head at once, before its map is drawn (a long input's takes
// seconds): its file is asked of the server, which needs nothing of the drawing.
export function bindHeadJump() {
  const jump = async () => {
    const res = state.overview;
    const text = headJump.value.trim();
    if (!text || !res) return;
    const head = parseHead(text);
    const valid = head && head[0] < res.num_layers && head[1] < res.num_heads;
    headJump.setAttribute("aria-invalid", String(!valid));
    if (!valid) {
      showError(`Go to head: “${text}” is not a head of ${res.model} (layers 0–` +
        `${res.num_layers - 1}, heads 0–${res.num_heads - 1}; write it as L18.H6).`);
      return;
    }
    const [l, h] = head;
    layerSelect.value = String(l);
    state.layerHead = h;
    state.jumpTo = [l, h];
    if (state.view !== "model" && state.view !== "layer") state.view = "layer";
    rememberHead(l, h);
    await page.renderView();
    headJump.focus();
  };
  headJump.addEventListener("keydown", (event) => {
    if (event.key === "Enter") {
      event.preventDefault();
      jump();
    }
  });
  headJump.addEventListener("change", jump);
}

// The head the model or layer view enlarges first: the jump box's, a link's, else the
// default (layer l's head state.layerHead in the layer view, head 0 of layer 0 in the model
// view).
export function firstHead(res, fallback) {
  const jumped = state.jumpTo;
  state.jumpTo = null;
  if (jumped) return jumped;
  return takeLinkedHead(res) ?? fallback;
}

// The heads switched off (Heads off) outlined in red on the model view's tiled grid, as
// shapes of its figure (drawn under the selection's outlines, which keep them).
export async function markAblated(grid, res) {
  const off = ablatedHeads().filter(([l, h]) => l < res.num_layers && h < res.num_heads);
  if (!off.length || !grid.tiles) return;
  grid.dataset.ablated = off.map(([l, h]) => `${l}.${h}`).join(",");
  const { tiles } = grid;
  const shapes = off.map(([l, h]) => ({
    type: "rect", xref: "x", yref: "y", layer: "above", name: "head-off",
    x0: tiles.x[h] - 0.5, x1: tiles.x[h] + tiles.width - 0.5,
    y0: tiles.y[l] - 0.5, y1: tiles.y[l] + tiles.height - 0.5,
    line: { color: "#d62728", width: 2 }, fillcolor: "rgba(214, 39, 40, 0.12)",
  }));
  await window.Plotly.relayout(grid, { shapes: [...(grid.layout.shapes || []), ...shapes] });
}

const DESCRIBED_WEIGHTS = 10; // the largest weights a map's text alternative lists

// Row or column k of a map whose rows start at token `first`, `f` tokens each (pooled):
// "12: cat", or "tokens 12–15" for a block.
function tokenName(tokens, k, f, first = 0) {
  const p = first + k * f;
  return f > 1 ? `tokens ${p}–${Math.min(p + f, tokens.length) - 1}` : `${p}: ${tokens[p]}`;
}

// The text alternative of `div`, an image labelled `title`: a table (captioned `caption`,
// headed by `columns`) in a visually hidden box after it, which its aria-describedby
// names. Returns the table's body, for the caller's rows.
function descriptionBody(div, title, caption, columns) {
  const table = document.createElement("table");
  table.className = "map-description";
  descriptionBody.count = (descriptionBody.count ?? 0) + 1;
  table.id = `${div.id || "map"}-description-${descriptionBody.count}`;
  table.createCaption().textContent = caption;
  const head = table.createTHead().insertRow();
  for (const text of columns) {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = text;
    head.append(th);
  }
  div.setAttribute("role", "img");
  div.setAttribute("aria-label", title);
  div.setAttribute("aria-describedby", table.id);
  // In a hidden box, not hidden itself: a table is never narrower than its contents.
  const box = document.createElement("div");
  box.className = "visually-hidden";
  box.append(table);
  div.after(box);
  return table.createTBody();
}

// A grid's text alternative (the model view's layers × heads, the layer view's heads):
// one row per map with its largest value, the query and key tokens where it lies, and the
// mean of its rows' largest values (how sharp the head is), as a visually hidden table
// the grid's aria-describedby names. `maps` is [[name, matrix], ...]; `factor` and
// `keyFactor` are tokens per row and column of pooled maps; `query`, the query position of
// maps of one row each (the token explorer's rows of one token in every head).
export function describeGrid(div, res, maps, title, { factor = 1, keyFactor = 1, query = null } = {}) {
  const queries = displayTokens(queryTokens(res));
  const keys = displayTokens(keyTokens(res));
  const body = descriptionBody(div, title, `${title}: each map's largest value`,
    ["map", "largest value", "query", "key", "mean of row maxima"]);
  for (const [label, z] of maps) {
    let [best, bi, bj, rowMaxSum, counted] = [-Infinity, 0, 0, 0, 0];
    z.forEach((row, i) => {
      let rowMax = -Infinity;
      row.forEach((v, j) => {
        if (v === null || v === undefined) return;
        if (v > rowMax) rowMax = v;
        if (v > best) [best, bi, bj] = [v, i, j];
      });
      if (rowMax > -Infinity) [rowMaxSum, counted] = [rowMaxSum + rowMax, counted + 1];
    });
    const row = body.insertRow();
    const th = document.createElement("th");
    th.scope = "row";
    th.textContent = label;
    row.append(th);
    row.insertCell().textContent = counted ? best.toFixed(4) : "–";
    row.insertCell().textContent = counted ? tokenName(queries, query ?? bi, factor) : "–";
    row.insertCell().textContent = counted ? tokenName(keys, bj, keyFactor) : "–";
    row.insertCell().textContent = counted ? (rowMaxSum / counted).toFixed(4) : "–";
  }
}

// A text alternative of a drawn map `div` of `res`'s input ({z, factor, keyFactor}): the
// div is an image labelled by `title`, described by a table (visually hidden) of its
// DESCRIBED_WEIGHTS largest weights with their query and key tokens (blocks when pooled).
export function describeMap(div, res, map, title) {
  const { z, factor = 1, keyFactor = 1, first = 0 } = map;
  const best = [];
  for (let i = 0; i < z.length; i += 1) {
    const row = z[i];
    for (let j = 0; j < row.length; j += 1) {
      const v = row[j];
      if (v === null || v === undefined) continue;
      if (best.length < DESCRIBED_WEIGHTS || v > best[best.length - 1][0]) {
        best.push([v, i, j]);
        best.sort((a, b) => b[0] - a[0]);
        if (best.length > DESCRIBED_WEIGHTS) best.pop();
      }
    }
  }
  const queries = displayTokens(queryTokens(res));
  const keys = displayTokens(keyTokens(res));
  // Row k is position first + k * f (first: a window's start, method_window).
  const body = descriptionBody(div, title, `The ${best.length} largest values of ${title}`,
    ["query", "key", "value"]);
  for (const [v, i, j] of best) {
    const row = body.insertRow();
    row.insertCell().textContent = tokenName(queries, i, factor, first);
    row.insertCell().textContent = tokenName(keys, j, keyFactor, first);
    row.insertCell().textContent = v.toFixed(4);
  }
}
