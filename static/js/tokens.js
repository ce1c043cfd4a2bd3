// Token selection, shared by the views of both pages. A selection is a set of query
// positions (token indices before any pooling). Every weight map outlines the selected
// query's row (what it attends to) and, in self-attention, the same token's column (what
// attends to it); the token strip shows the text with each key token shaded by the
// weight the selection gives it. Click a token (in the strip, on a map's row or on an
// axis label) to select it; shift-click adds it to the selection (the weights are then
// summed over the selected rows); Escape clears it; the arrow keys in the strip move it.
import { option } from "./api.js";
import { plotlyReady } from "./heatmap.js";

export const ROW_COLOR = "#d94801"; // the selected query's row: solid
export const COLUMN_COLOR = "#6a3d9a"; // the selected token's column (self-attention): dashed

// Whether a click or key press adds to the selection rather than replacing it.
export function additive(event) {
  return Boolean(event && (event.shiftKey || event.metaKey || event.ctrlKey));
}

// The next selection after position `q` was chosen: {q} alone, or with `add` the
// previous selection with q toggled.
export function nextSelection(previous, q, add) {
  if (!add) return new Set([q]);
  const next = new Set(previous);
  if (next.has(q)) next.delete(q);
  else next.add(q);
  return next;
}

// The outline shapes of the selection on one map (or one tile of a tiled grid):
// positions are token indices; a map pooled by rowFactor / colFactor outlines the block
// holding the token. box = {x, y, rows, cols}: the map's first column and row in its
// axis units (0 for a plain heatmap) and its size in cells. `self`: the keys are the
// same tokens as the queries, so the column is outlined too.
export function selectionShapes(positions, box, self = true, rowFactor = 1, colFactor = 1) {
  const shapes = [];
  const { x = 0, y = 0, rows, cols } = box;
  for (const q of positions) {
    const i = Math.floor(q / rowFactor);
    if (i < rows) {
      shapes.push({
        type: "rect", xref: "x", yref: "y", layer: "above", name: "selected-row",
        x0: x - 0.5, x1: x + cols - 0.5, y0: y + i - 0.5, y1: y + i + 0.5,
        line: { color: ROW_COLOR, width: 2 }, fillcolor: "rgba(0,0,0,0)",
      });
    }
    const j = Math.floor(q / colFactor);
    if (self && j < cols) {
      shapes.push({
        type: "rect", xref: "x", yref: "y", layer: "above", name: "selected-column",
        x0: x + j - 0.5, x1: x + j + 0.5, y0: y - 0.5, y1: y + rows - 0.5,
        line: { color: COLUMN_COLOR, width: 2, dash: "dot" }, fillcolor: "rgba(0,0,0,0)",
      });
    }
  }
  return shapes;
}

// Show `shapes` on a drawn Plotly div, over the shapes its figure had (kept in
// div.baseShapes the first time).
export async function outline(div, shapes) {
  const plotly = await plotlyReady;
  if (!div.isConnected || !div.layout) return;
  if (!div.baseShapes) div.baseShapes = (div.layout.shapes || []).slice();
  await plotly.relayout(div, { shapes: [...div.baseShapes, ...shapes] });
}

// Sum over the selected rows of `map` (rows x cols, null = masked, read as 0): the
// weight each key gets from the selection. Rows of a pooled map are blocks of rowFactor.
export function selectedWeights(map, positions, rowFactor = 1) {
  const cols = (map[0] || []).length;
  const sums = new Array(cols).fill(0);
  const rows = new Set([...positions].map((q) => Math.floor(q / rowFactor)));
  for (const i of rows) {
    const row = map[i];
    if (!row) continue;
    for (let j = 0; j < cols; j += 1) sums[j] += row[j] ?? 0;
  }
  return sums;
}

// Mean of several per-key weight arrays (the heads' average).
export function meanOf(arrays) {
  const n = arrays.length;
  const mean = new Array((arrays[0] || []).length).fill(0);
  for (const values of arrays) values.forEach((v, j) => { mean[j] += v / n; });
  return mean;
}

// The weight each key gets from the selected rows of the heads' `maps` (H x rows x keys):
// from head `shade` (a head index as text) or, with "mean", the mean over the heads.
export function shadedWeights(maps, positions, shade, rowFactor = 1) {
  if (shade !== "mean") return selectedWeights(maps[Number(shade)], positions, rowFactor);
  return meanOf(maps.map((map) => selectedWeights(map, positions, rowFactor)));
}

// Fill a <select> with "mean" (reading `meanText`) and heads 0 .. count - 1, keeping its
// choice when the new list has it.
export function fillHeadChoice(select, count, meanText = "the mean of the heads") {
  const previous = select.value;
  select.replaceChildren(option("mean", meanText),
    ...Array.from({ length: count }, (_, h) => option(String(h), `head ${h}`)));
  if ([...select.options].some((o) => o.value === previous)) select.value = previous;
}

// The most tokens a strip shows at once: a longer input's strip shows one page of them
// (the page of the focused or first selected token), with buttons to the earlier and
// later pages and a field to go to any token, so that a page of 131,072 tokens holds
// STRIP_PAGE chips, not one per token.
export const STRIP_PAGE = 1024;

// The first position of the page a strip of `length` tokens shows: `options.pageStart`
// (the strip's own buttons), else the page of the focused chip, of the first selected
// token, or the one shown before.
function stripPage(container, length, selected, active, options) {
  if (length <= STRIP_PAGE) return 0;
  let anchor = options.pageStart;
  if (anchor === undefined && active !== undefined) anchor = Number(active);
  if (anchor === undefined && selected.size) anchor = Math.min(...selected);
  if (anchor === undefined) anchor = Number(container.dataset.pageStart ?? 0);
  const clamped = Math.min(Math.max(0, anchor || 0), length - 1);
  return clamped - (clamped % STRIP_PAGE);
}

// The bar above a paged strip: which tokens it shows, earlier / later, go to a token.
function stripPager(container, tokens, options, start) {
  const length = tokens.length;
  const stop = Math.min(length, start + STRIP_PAGE);
  const bar = document.createElement("div");
  bar.className = "strip-pager";
  const shown = document.createElement("span");
  shown.className = "strip-range";
  shown.textContent = `tokens ${start}–${stop - 1} of ${length.toLocaleString("en")}`;
  const go = (first) => tokenStrip(container, tokens, { ...options, pageStart: first });
  const button = (text, label, first) => {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = text;
    b.setAttribute("aria-label", label);
    b.disabled = first < 0 || first >= length;
    b.addEventListener("click", () => go(first));
    return b;
  };
  const field = document.createElement("input");
  field.type = "number";
  field.min = "0";
  field.max = String(length - 1);
  field.placeholder = "go to token";
  field.setAttribute("aria-label", `Go to token (0 to ${length - 1})`);
  field.addEventListener("change", () => {
    const q = Number(field.value);
    if (Number.isInteger(q) && q >= 0 && q < length) go(q);
  });
  bar.append(button("◀", "Earlier tokens", start - STRIP_PAGE), shown,
    button("▶", "Later tokens", stop), field);
  return bar;
}

// The token strip: `tokens` (plain text) as buttons, in a container with
// role="listbox". options:
//   selected (Set of positions), weights (per token: the weight from the selection, or
//   null: no shading), label (the strip's aria-label), onSelect(position, add).
// Each token's background is shaded by its weight relative to the largest one (the
// darkest token gets the most), its title gives the weight, and data-weight holds it.
// Over STRIP_PAGE tokens, one page of them (stripPage, stripPager).
export function tokenStrip(container, tokens, options) {
  const { selected = new Set(), weights = null, onSelect } = options;
  // The chip that has the focus (clicked, Enter, an arrow key) keeps it in the new strip:
  // the arrow keys go on working from it.
  const active = container.contains(document.activeElement)
    ? document.activeElement.dataset.position : undefined;
  const start = stripPage(container, tokens.length, selected, active, options);
  const stop = Math.min(tokens.length, start + STRIP_PAGE);
  container.dataset.pageStart = String(start);
  const strip = document.createElement("div");
  strip.className = "token-strip";
  strip.setAttribute("role", "listbox");
  strip.setAttribute("aria-multiselectable", "true");
  strip.setAttribute("aria-label", options.label || "Tokens: select one to see where it looks");
  let top = 1e-12;
  for (const w of weights ?? []) top = Math.max(top, w ?? 0);
  for (let q = start; q < stop; q++) {
    const token = tokens[q];
    const chip = document.createElement("button");
    chip.type = "button";
    chip.className = "token";
    chip.setAttribute("role", "option");
    chip.dataset.position = String(q);
    chip.textContent = String(token);
    const isSelected = selected.has(q);
    chip.setAttribute("aria-selected", String(isSelected));
    chip.tabIndex = isSelected || (selected.size === 0 && q === start) ? 0 : -1;
    if (weights) {
      const w = weights[q] ?? 0;
      chip.dataset.weight = String(w);
      const shade = Math.min(1, w / top);
      chip.style.setProperty("--weight", String(shade));
      chip.classList.toggle("dark", shade > 0.55); // white text on the darker shades
      chip.title = `token ${q}: ${token} · weight from the selection ${w.toFixed(4)}`;
    } else {
      chip.title = `token ${q}: ${token}`;
    }
    chip.addEventListener("click", (event) => onSelect(q, additive(event)));
    strip.append(chip);
  }
  strip.addEventListener("keydown", (event) => {
    const chip = event.target.closest(".token");
    if (!chip) return;
    const q = Number(chip.dataset.position);
    const step = { ArrowLeft: -1, ArrowUp: -1, ArrowRight: 1, ArrowDown: 1 }[event.key];
    if (step !== undefined) {
      event.preventDefault();
      const next = Math.min(tokens.length - 1, Math.max(0, q + step));
      onSelect(next, false, true);
    } else if (event.key === "Escape") {
      event.preventDefault();
      onSelect(null, false, true);
    }
  });
  if (tokens.length > STRIP_PAGE) container.replaceChildren(stripPager(container, tokens, options, start), strip);
  else container.replaceChildren(strip);
  const focused = active === undefined ? null : strip.querySelector(`.token[data-position="${active}"]`);
  if (focused) {
    for (const chip of strip.querySelectorAll(".token[tabindex='0']")) chip.tabIndex = -1;
    focused.tabIndex = 0;
    focused.focus({ preventScroll: true });
  }
  return strip;
}

// Focus the strip's chip for position q (after a keyboard move redrew the strip).
export function focusToken(container, q) {
  const chip = container.querySelector(`.token[data-position="${q}"]`);
  if (chip) chip.focus();
}
