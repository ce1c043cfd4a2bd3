// What the lesson views share: their notes, figure grids and tables, the request fields
// they send, and the lessons' own bounds.
import { COMPACT, LAYER_FIELDS, paragraph } from "../api.js";

// The lessons' own bounds (the server's, in templates/index.html): a longer sequence is a
// note in that lesson, not an error of the form.
export const LESSON_LIMITS = JSON.parse(document.getElementById("lesson-limits").textContent);

// The tokens of a sequence as the form sends it: ids, or words split on whitespace (the
// engine's labels: app/attention/tokens.py).
export function sequenceTokens(sequence) {
  return Array.isArray(sequence) ? sequence.map(String) : sequence.trim().split(/\s+/u);
}

export function tokenCount(sequence) {
  return sequenceTokens(sequence).length;
}

const PREVIEW_TOKENS = 6; // the first tokens a sequence's choice shows
const PREVIEW_CHARS = 60;

// The choices of a picker of the request's sequences: each one's number, its first tokens
// as typed and, when longer, its length ("1: the cat sat on the mat … (300 tokens)"). Read
// from the request, not from the response, whose labels are blocks of tokens ("the…cat")
// when the maps are pooled; one choice per sequence (at most the API's batch limit).
export function sequenceChoices(request) {
  return request.sequences.map((sequence, b) => {
    const tokens = sequenceTokens(sequence);
    let preview = [...tokens.slice(0, PREVIEW_TOKENS).join(" ")];
    if (preview.length > PREVIEW_CHARS) preview = [...preview.slice(0, PREVIEW_CHARS - 1), "…"];
    const more = tokens.length > PREVIEW_TOKENS ? ` … (${tokens.length} tokens)` : "";
    return `${b}: ${preview.join("")}${more}`;
  });
}

export function range(n) {
  return [...Array(n).keys()];
}

export function note(container, text) {
  return paragraph(container, "view-note", text);
}

// The grid (div.plots) the figures of a view go in.
export function plotGrid(body) {
  const grid = document.createElement("div");
  grid.className = "plots";
  body.append(grid);
  return grid;
}

export function table(container, header, rows, highlight = () => false) {
  const element = document.createElement("table");
  element.className = "data-table";
  const head = element.createTHead().insertRow();
  for (const cell of header) {
    const th = document.createElement("th");
    th.textContent = cell;
    head.append(th);
  }
  const body = element.createTBody();
  for (const row of rows) {
    const tr = body.insertRow();
    if (highlight(row)) tr.className = "current";
    for (const cell of row) tr.insertCell().textContent = String(cell);
  }
  container.append(element);
  return element;
}

// Only the selected sequence and head travel back, as base64 float32.
export function oneHead(ctx) {
  return { sequence_index: ctx.sequence, head_index: ctx.head, ...COMPACT };
}

export function layerFields(request) {
  return Object.fromEntries(LAYER_FIELDS.map((name) => [name, request[name]]));
}

// A view control's value, trimmed.
export function controlValue(id) {
  return document.getElementById(id).value.trim();
}
