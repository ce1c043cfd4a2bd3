// The errors of / : the API's message in the box under Compute, and each error that names
// a field beside that field.
import { errorBox, jsonFetcher } from "../api.js";

export const errorElement = document.getElementById("error");
const errors = errorBox(errorElement);

// The control of each API field (JSON name) the page sends: the form's fields and the
// lesson views' own controls. An error whose location names one of them is shown
// beside it.
const FIELD_IDS = {
  sequences: "sequences", sequence: "sequences", targets: "targets", d_model: "d_model",
  num_heads: "num_heads", seed: "seed", pad_id: "pad_id", vocab_size: "vocab_size",
  device: "device", mask: "mask-causal", mask_fill: "mask_fill", scale: "scale",
  num_layers: "num-layers", d_ff: "d-ff", positional_encoding: "positional-encoding",
  dropout: "dropout-p", dropout_seed: "dropout-seed",
};

// Pydantic's wording, said plainly.
const PLAIN = [
  [/^Input should be greater than or equal to (.+)$/, "must be at least $1"],
  [/^Input should be less than or equal to (.+)$/, "must be at most $1"],
  [/^Input should be greater than (.+)$/, "must be more than $1"],
  [/^Input should be less than (.+)$/, "must be less than $1"],
  [/^Input should be a valid integer.*$/, "must be a whole number"],
  [/^Input should be a valid number.*$/, "must be a number"],
  [/^List should have at least 1 item.*$/, "is empty: enter at least one line"],
  [/^Field required$/, "is required"],
];

function plain(message) {
  for (const [pattern, replacement] of PLAIN) {
    if (pattern.test(message)) return message.replace(pattern, replacement);
  }
  return message;
}

// One line of fetchJson's message, "<field>[i]: <message>" (api.js formatLoc), as
// {name, index, message}; name is null when the line names no field.
function parseErrorLine(line) {
  const match = /^([A-Za-z_]\w*)((?:\[\d+\]|\.\w+)*): (.*)$/.exec(line);
  if (!match) return { name: null, index: null, message: line };
  const index = /^\[(\d+)\]/.exec(match[2]);
  return { name: match[1], index: index ? Number(index[1]) : null, message: plain(match[3]) };
}

// Shows the API's message: each error that names a field beside that field (outlined,
// aria-invalid, described by the message), and all of them in the box under Compute.
function showError(message) {
  clearFieldErrors();
  const lines = String(message).split("\n").map(parseErrorLine);
  const summaryLines = [];
  for (const { name, index, message: text } of lines) {
    const field = name && document.getElementById(FIELD_IDS[name] || "");
    if (!field) {
      summaryLines.push(name ? `${name}: ${text}` : text);
      continue;
    }
    const where = index !== null && (name === "sequences" || name === "targets")
      ? `line ${index + 1}: ` : "";
    markField(field, `${where}${text}`);
    // "num_heads: num_heads must divide ..." names the field once.
    summaryLines.push(text.startsWith(`${name} `) && !where
      ? text : `${name}${where ? ` ${where.slice(0, -2)}` : ""}: ${text}`);
  }
  errors.show(`Not computed:\n${summaryLines.join("\n")}`);
}

function markField(field, text) {
  let note = document.getElementById(`${field.id}-error`);
  if (!note) {
    note = document.createElement("p");
    note.id = `${field.id}-error`;
    note.className = "field-error";
    // Below the field: inside its cell of the grid, after its label when the label
    // holds it (checkboxes), at the end of a row of view controls.
    const box = field.closest(".view-controls, .grid-2 > div");
    if (box) box.append(note);
    else (field.closest("label.inline, label") || field).after(note);
  }
  note.textContent = note.textContent ? `${note.textContent}; ${text}` : text;
  field.setAttribute("aria-invalid", "true");
  field.setAttribute("aria-describedby", note.id);
}

export function unmarkField(field) {
  if (field.getAttribute("aria-invalid") !== "true") return;
  field.removeAttribute("aria-invalid");
  field.removeAttribute("aria-describedby");
  const note = document.getElementById(`${field.id}-error`);
  if (note) note.remove();
}

function clearFieldErrors() {
  for (const field of document.querySelectorAll("[aria-invalid=true]")) unmarkField(field);
}

export function clearError() {
  clearFieldErrors();
  errors.clear();
}

// POST or GET JSON; on an HTTP error, shows the API's message by the form (and by the
// field it names) and returns null.
export const fetchJson = jsonFetcher(showError);
