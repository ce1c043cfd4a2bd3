// Token-centred views shared by both pages, drawn as plain SVG and HTML (no Plotly):
//   lineView:   BertViz's head view (jessevig/bertviz, head_view.js): the queries in a left
//               column, the keys in a right one, a line per (query, key, head) as thick and
//               as opaque as its weight, one colour per head (headColors). Hover a head to
//               see only its lines, double-click it to see it alone (again: every head);
//               hover a token to see only its lines; heads switch off and on.
//   neuronView: BertViz's neuron view: for one head and one query, the query vector q,
//               each key vector k, their elementwise product q∘k, the score q·k, the
//               scaled score (× the model's scaling, 1/√d_k in the paper) and the
//               softmax weight (Vaswani et al. 2017, eq. 1; the seeds' tutorial 001).
// Tokens are shown as displayToken writes them (␣ for a space, byte-level BPE decoded).
// Every line and row carries its numbers in data-* attributes (tests read them).

import { displayToken } from "./lib/display.js";
import { additive } from "./tokens.js";

const SVG = "http://www.w3.org/2000/svg";

// Head colours. Up to 12 heads: D3's category10 (Plotly's default trace colours) in its
// order, then an indigo and a wine, each one's lightness and chroma adjusted (a small
// search in OKLab, Ottosson 2020) so that every colour has 3:1 contrast (WCAG 2.1, 1.4.11
// non-text contrast) on the light panel (#ffffff) and on the dark one (#1d2127) alike, and
// any two differ by at least 0.125 in OKLab. category10 itself has four colours under 3:1
// on white (orange, pink, olive, cyan) and its closest pair (brown, grey) 0.113 apart.
// More heads: evenly spaced OKLCH hues, the lightness alternating between two levels that
// keep 3:1 on both panels, so that neighbouring heads differ in hue and in lightness.
// tests/browser/test_line_view.py checks all of this.
export const HEAD_COLORS = [
  "#1f71a6", "#e57400", "#0a9b03", "#e40f22", "#906daf", "#a85842",
  "#e163b9", "#768372", "#9b9707", "#019ebf", "#5562eb", "#c0347e",
];
const HUE_START = 250; // the OKLCH hue of head 0 beyond 12 heads (a blue, as in category10)
const LIGHTNESS = [0.56, 0.64]; // OKLab L of even and odd heads (the luminance is about L³)
const CHROMA = 0.14; // lowered until the colour is inside sRGB

// OKLCH to #rrggbb (Ottosson's OKLab to linear sRGB, then the sRGB transfer function);
// null outside the sRGB gamut.
function oklchToHex(lightness, chroma, hueDegrees) {
  const a = chroma * Math.cos((hueDegrees * Math.PI) / 180);
  const b = chroma * Math.sin((hueDegrees * Math.PI) / 180);
  const l = (lightness + 0.3963377774 * a + 0.2158037573 * b) ** 3;
  const m = (lightness - 0.1055613458 * a - 0.0638541728 * b) ** 3;
  const s = (lightness - 0.0894841775 * a - 1.291485548 * b) ** 3;
  const linear = [
    4.0767416621 * l - 3.3077115913 * m + 0.2309699292 * s,
    -1.2684380046 * l + 2.6097574011 * m - 0.3413193965 * s,
    -0.0041960863 * l - 0.7034186147 * m + 1.707614701 * s,
  ];
  if (linear.some((c) => c < -1e-4 || c > 1 + 1e-4)) return null;
  const byte = (c) => {
    const v = Math.min(1, Math.max(0, c));
    const encoded = v <= 0.0031308 ? 12.92 * v : 1.055 * v ** (1 / 2.4) - 0.055;
    return Math.round(encoded * 255).toString(16).padStart(2, "0");
  };
  return `#${linear.map(byte).join("")}`;
}

/** The colours of `count` heads, "#rrggbb" each, pairwise distinct (see HEAD_COLORS). */
export function headColors(count) {
  if (count <= HEAD_COLORS.length) return HEAD_COLORS.slice(0, count);
  // An even number of hue slots, so that the last head and the first (neighbours on the
  // hue circle) differ in lightness too: an odd count leaves one slot empty.
  const slots = count + (count % 2);
  return Array.from({ length: count }, (_, h) => {
    const hue = HUE_START + (360 * h) / slots;
    let chroma = CHROMA;
    while (chroma > 0 && oklchToHex(LIGHTNESS[h % 2], chroma, hue) === null) chroma -= 0.005;
    return oklchToHex(LIGHTNESS[h % 2], Math.max(chroma, 0), hue);
  });
}

const ROW_PX = 20; // one token per row in each column
const CHAR_PX = 7.3; // the width of one character of the 12 px monospace labels
const MIN_LINE_PX = 0.5; // the stroke of a weight near 0 ...
const MAX_LINE_PX = 6; // ... and of a weight of 1, for one head (less for more heads)
const MIN_LINE_OPACITY = 0.15; // the stroke's opacity: from this, growing as √weight
const HEAD_SPREAD_PX = 14; // the heads' line ends spread over this much of a token's row
const ALL_LINES_MAX = 40; // with nothing selected, lines are drawn up to this many queries

function svgElement(name, attributes) {
  const element = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, String(value));
  return element;
}

// With nothing selected, each query's strongest key(s) in each head: one line per (head,
// query), ties all drawn. Every line of every query (L_q × L_k × H: 800 for 10 tokens and
// 8 heads) is a hairball in which no head's pattern can be followed; the strongest lines
// show each head's pattern at a glance (the diagonal, the previous token, the first
// token), thin and faint where the row is flat. Selecting the last token by default
// would show one row out of L_q and pick a token for the user. Hovering a token brings
// back all its lines.
function strongestKeys(row) {
  let top = 0;
  for (const w of row) if (w !== null && w > top) top = w;
  return top > 0 ? row.flatMap((w, k) => (w === top ? [k] : [])) : [];
}

// The head toggles: one checkbox and colour swatch per head; `visible` (a Set) is changed
// in place. handlers: changed() after a toggle, hover(h or null) while the pointer or the
// keyboard focus is on head h, solo(h) on a double-click (or Enter). Returns sync(), which
// sets the checkboxes from `visible` again.
function headToggles(container, colors, visible, handlers) {
  const box = document.createElement("div");
  box.className = "head-toggles";
  box.setAttribute("role", "group");
  box.setAttribute("aria-label", "Heads shown (hover: only its lines; double-click or Enter: it alone)");
  const inputs = colors.map((color, h) => {
    const label = document.createElement("label");
    label.className = "head-toggle";
    label.dataset.head = String(h);
    label.style.setProperty("--head-color", color);
    const input = document.createElement("input");
    input.type = "checkbox";
    input.checked = visible.has(h);
    input.dataset.head = String(h);
    input.addEventListener("change", () => {
      if (input.checked) visible.add(h);
      else visible.delete(h);
      handlers.changed();
    });
    input.addEventListener("keydown", (event) => {
      if (event.key !== "Enter") return;
      event.preventDefault();
      handlers.solo(h);
    });
    input.addEventListener("focus", () => handlers.hover(h));
    input.addEventListener("blur", () => handlers.hover(null));
    const swatch = document.createElement("span");
    swatch.className = "head-swatch";
    swatch.setAttribute("aria-hidden", "true");
    label.append(input, swatch, `head ${h}`);
    label.addEventListener("mouseenter", () => handlers.hover(h));
    label.addEventListener("mouseleave", () => handlers.hover(null));
    // The double-click's two clicks have toggled the head off and on again.
    label.addEventListener("dblclick", (event) => {
      event.preventDefault();
      handlers.solo(h);
    });
    box.append(label);
    return input;
  });
  container.append(box);
  return () => inputs.forEach((input, h) => { input.checked = visible.has(h); });
}

// The line view. options:
//   queries, keys (token labels: the tokenizer's strings or displayToken's; shown through
//   displayToken), maps (H x L_q x L_k weights, null = masked), selected (Set of query
//   positions; empty: each query's strongest keys, see strongestKeys, up to ALL_LINES_MAX
//   queries), visible (Set of the heads drawn, kept across redraws: the toggles change it
//   in place, a double-click on head h makes it {h}, another one every head),
//   onSelect(q, add) on a click on query q.
// Hovering (or focusing) a head that is switched on fades the other heads' lines (class
// "faded"). Hovering a query draws its lines to every key (a selected one: the other
// selected queries' lines stay, faded), hovering a key every query's line to it, until
// the pointer leaves; the selection is unchanged. Returns the <svg>; its data-lines says
// what is drawn: "strongest", "selected", "query", "key" or "none".
export function lineView(container, options) {
  const { maps, selected, visible, onSelect } = options;
  const queries = Array.from(options.queries, displayToken);
  const keys = Array.from(options.keys, displayToken);
  const colors = headColors(maps.length);
  const focus = { head: null, query: null, key: null }; // under the pointer or the focus
  container.replaceChildren();
  let draw = () => {}; // set below, once the SVG exists: draws the lines and the caption
  const syncToggles = headToggles(container, colors, visible, {
    changed: () => draw(),
    hover: (h) => {
      focus.head = h;
      draw();
    },
    solo: (h) => {
      const alone = visible.size === 1 && visible.has(h);
      visible.clear();
      for (let head = 0; head < maps.length; head += 1) if (alone || head === h) visible.add(head);
      syncToggles();
      draw();
    },
  });
  const usage = document.createElement("p");
  usage.className = "hint line-usage";
  usage.textContent = "Hover a token or a head to see only its lines; double-click a head " +
    "to see it alone (again: every head).";
  const caption = document.createElement("p");
  caption.className = "hint line-caption";
  container.append(usage, caption);

  const rows = Math.max(queries.length, keys.length);
  const width = Math.min(Math.max(container.clientWidth || 640, 300), 760);
  // Each column as wide as its longest label, up to 30% of the width (longer: cut, with …).
  const longest = Math.max(1, ...queries.map((t) => t.length), ...keys.map((t) => t.length));
  const labelChars = Math.max(3, Math.min(longest, Math.floor((Math.min(160, width * 0.3) - 14) / CHAR_PX)));
  const labelWidth = Math.max(48, Math.ceil(labelChars * CHAR_PX + 14));
  const height = rows * ROW_PX + 10;
  const svg = svgElement("svg", {
    class: "line-view", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": "Lines from the query tokens (left) to the key tokens (right)",
  });
  const left = labelWidth;
  const right = width - labelWidth;
  const y = (i) => 5 + i * ROW_PX + ROW_PX / 2;
  // Weights are at most 1; other methods' values (norms) are drawn relative to the largest.
  let unit = 1;
  for (const map of maps) for (const row of map || []) for (const w of row) unit = Math.max(unit, w ?? 0);
  const lines = svgElement("g", { class: "lines" });
  svg.append(lines);

  const tokenRows = { queries: [], keys: [] };
  const column = (tokens, side) => {
    const group = svgElement("g", { class: `line-tokens ${side}` });
    tokens.forEach((token, i) => {
      const row = svgElement("g", { class: "line-token-row", "data-position": i });
      const hit = svgElement("rect", {
        class: "line-token-hit", x: side === "queries" ? 0 : right, y: y(i) - ROW_PX / 2,
        width: labelWidth, height: ROW_PX,
      });
      const text = svgElement("text", {
        x: side === "queries" ? left - 8 : right + 8, y: y(i),
        "text-anchor": side === "queries" ? "end" : "start", "dominant-baseline": "middle",
        class: side === "queries" && selected.has(i) ? "line-token selected" : "line-token",
        "data-position": i,
      });
      text.textContent = token.length > labelChars ? `${token.slice(0, labelChars - 1)}…` : token;
      if (token.length > labelChars) {
        const title = svgElement("title", {});
        title.textContent = token;
        row.append(title);
      }
      row.append(hit, text);
      const hover = (on) => {
        focus[side === "queries" ? "query" : "key"] = on ? i : null;
        draw();
      };
      row.addEventListener("mouseenter", () => hover(true));
      row.addEventListener("mouseleave", () => hover(false));
      if (side === "queries") {
        text.setAttribute("tabindex", "0");
        text.setAttribute("role", "button");
        text.addEventListener("focus", () => hover(true));
        text.addEventListener("blur", () => hover(false));
        row.addEventListener("click", (event) => onSelect(i, additive(event)));
        text.addEventListener("keydown", (event) => {
          if (event.key === "Enter" || event.key === " ") {
            event.preventDefault();
            onSelect(i, additive(event));
          }
        });
      }
      tokenRows[side].push(row);
      group.append(row);
    });
    svg.append(group);
  };
  column(queries, "queries");
  column(keys, "keys");
  container.append(svg);

  const chosen = [...selected].filter((q) => q < queries.length);
  const everyQuery = queries.map((_, q) => q);
  draw = () => {
    // 1) What is drawn: the hovered token's lines, else the selected queries', else each
    //    query's strongest (see strongestKeys). A hovered query that is selected keeps the
    //    other selected queries' lines, faded, below its own.
    let mode = "none";
    let drawn = [];
    if (focus.query !== null) {
      const others = chosen.includes(focus.query) ? chosen.filter((q) => q !== focus.query) : [];
      [mode, drawn] = ["query", [...others, focus.query]];
    } else if (focus.key !== null) {
      [mode, drawn] = ["key", everyQuery];
    } else if (chosen.length) {
      [mode, drawn] = ["selected", chosen];
    } else if (queries.length <= ALL_LINES_MAX) {
      [mode, drawn] = ["strongest", everyQuery];
    }
    // 2) The heads switched on; the hovered one (if on) drawn last, on top, the others faded.
    const shown = [...visible].filter((h) => h < maps.length && maps[h]).sort((a, b) => a - b);
    const lead = shown.includes(focus.head) ? focus.head : null;
    const heads = lead === null ? shown : [...shown.filter((h) => h !== lead), lead];
    // 3) One line per (head, query, key) with a positive weight. The n heads drawn share
    //    HEAD_SPREAD_PX of each token's row: head h's lines end at its own height, so that
    //    the heads' lines between the same two tokens lie side by side, not on top of each
    //    other (one mauve where 8 heads blend); the stroke of a weight of 1 is about two
    //    slots wide, between 2.5 px and MAX_LINE_PX.
    const slot = HEAD_SPREAD_PX / Math.max(1, shown.length - 1);
    const offset = (h) => (shown.length > 1 ? shown.indexOf(h) * slot - HEAD_SPREAD_PX / 2 : 0);
    const widest = Math.min(MAX_LINE_PX, Math.max(2.5, 2 * slot));
    const drawnLines = [];
    for (const h of heads) {
      for (const q of drawn) {
        const row = maps[h][q] || [];
        let wanted = row.keys();
        if (mode === "key") wanted = [focus.key];
        else if (mode === "strongest") wanted = strongestKeys(row);
        for (const k of wanted) {
          const w = row[k];
          if (w === null || w === undefined || w <= 0) continue;
          const r = w / unit;
          drawnLines.push(svgElement("line", {
            x1: left, y1: y(q) + offset(h), x2: right, y2: y(k) + offset(h),
            stroke: colors[h],
            "stroke-width": MIN_LINE_PX + r * (widest - MIN_LINE_PX),
            "stroke-opacity": MIN_LINE_OPACITY + Math.sqrt(r) * (1 - MIN_LINE_OPACITY),
            class: (lead !== null && h !== lead) || (mode === "query" && q !== focus.query) ? "faded" : "",
            "data-head": h, "data-query": q, "data-key": k, "data-weight": w,
          }));
        }
      }
    }
    lines.replaceChildren(...drawnLines);
    svg.dataset.lines = mode;
    svg.dataset.focusHead = lead ?? "";
    for (const side of ["queries", "keys"]) {
      const on = focus[side === "queries" ? "query" : "key"];
      tokenRows[side].forEach((row, i) => row.classList.toggle("hovered", i === on));
    }
    for (const label of container.querySelectorAll(".head-toggle")) {
      label.classList.toggle("faded", lead !== null && Number(label.dataset.head) !== lead);
    }
    // 4) The caption says what is drawn.
    const says = {
      none: `Over ${ALL_LINES_MAX} tokens: select (or hover) a query token on the left to draw its lines.`,
      strongest: "Nothing selected: each query's strongest key in each head.",
      selected: `The selected ${chosen.length === 1 ? "query's" : "queries'"} lines to every key.`,
      query: `Query ${focus.query} (${queries[focus.query]}): its lines to every key` +
        (drawn.length > 1 ? "; the other selected queries' faded." : "."),
      key: `Key ${focus.key} (${keys[focus.key]}): every query's line to it.`,
    };
    caption.textContent = says[mode] + (lead === null ? "" : ` Head ${lead} on top, the others faded.`);
  };
  draw();
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

// The most key rows the neuron view draws (each is 2 d_k + 4 cells: 131 for SmolLM2);
// a longer input's keys are the NEURON_ROWS of largest weight, in their order, with a
// note of the others' share.
export const NEURON_ROWS = 128;

// The keys the neuron view draws: every position up to `most`, else the `most` unmasked
// ones of largest weight, in position order.
function drawnKeys(weights, masked, most) {
  const every = weights.map((_, j) => j);
  if (every.length <= most) return every;
  return every.filter((j) => !masked[j]).sort((a, b) => weights[b] - weights[a])
    .slice(0, most).sort((a, b) => a - b);
}

// The neuron view of one head and one query. options:
//   queryLabel, keyLabels (token strings, shown through displayToken), query (d_k),
//   keys (L_k x d_k), scaling, masked (L_k booleans), weights (L_k), title, maxRows
//   (default NEURON_ROWS: the keys drawn, see drawnKeys).
// Each key's row holds data-position, data-score (q·k), data-scaled and data-weight; the
// q row holds the vector in data-vector, each key row its k in data-vector.
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
  const shown = drawnKeys(weights, masked, options.maxRows ?? NEURON_ROWS);
  if (shown.length < keys.length) {
    let rest = 1;
    for (const j of shown) rest -= weights[j];
    const note = document.createElement("p");
    note.className = "hint neuron-rows-note";
    note.textContent = `The ${shown.length} keys of largest weight of ${keys.length}, in ` +
      `their order; the other ${keys.length - shown.length} take ` +
      `${(100 * Math.max(0, rest)).toFixed(1)}% of the weight` +
      `${masked.some(Boolean) ? " (masked keys take none)" : ""}.`;
    container.append(note);
  }
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
  qLabel.textContent = `q: ${displayToken(options.queryLabel)}`;
  qRow.append(qLabel);
  vectorCells(qRow, query, top, "q");
  const spacer = document.createElement("td");
  spacer.colSpan = dk + 3;
  qRow.append(spacer);
  for (const j of shown) {
    const k = keys[j];
    const row = body.insertRow();
    row.className = masked[j] ? "neuron-key masked" : "neuron-key";
    row.dataset.position = String(j);
    const score = k.reduce((sum, v, d) => sum + v * query[d], 0);
    row.dataset.vector = JSON.stringify(k);
    row.dataset.score = String(score);
    row.dataset.scaled = String(score * scaling);
    row.dataset.weight = String(weights[j]);
    const label = document.createElement("th");
    label.textContent = displayToken(options.keyLabels[j]);
    row.append(label);
    vectorCells(row, k, top, "k");
    vectorCells(row, products[j], productTop, "q∘k");
    numberCell(row, score, 3);
    numberCell(row, score * scaling, 3);
    numberCell(row, masked[j] ? null : weights[j], 3);
  }
  const scroller = document.createElement("div");
  scroller.className = "neuron-scroll";
  scroller.append(table);
  container.append(scroller);
  return table;
}
