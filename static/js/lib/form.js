// The form and its results: the error box, the progress indicator, reading lines and
// numbers, filling <select>s.
// (Shared by both pages through ../api.js.)

// The form and its results.

// The error box beside a form: show(message) and clear().
export function errorBox(element) {
  return {
    show(message) {
      element.textContent = message;
      element.hidden = false;
    },
    clear() {
      element.textContent = "";
      element.hidden = true;
    },
  };
}

// How long a wait runs before #progress shows ("Computing…", or the waiter's label).
export const PROGRESS_DELAY_MS = 300;

// Progress: #progress shows while any wait has lasted PROGRESS_DELAY_MS (a count, so
// that overlapping waits, a Compute and a click that fetches, share it).
let busyCount = 0;
let busyTimer = null;

// Run `task` (async) with `button` (Compute, or null) disabled and #progress reading
// `label` once it has taken PROGRESS_DELAY_MS; both are undone however it ends.
// Resolves to the task's result. Every wait of both pages goes through here: Compute,
// tab switches, clicks that fetch, and the drawing of large views.
export async function busy(task, label = "Computing…", button = null) {
  const progress = document.getElementById("progress");
  busyCount += 1;
  if (button) button.disabled = true;
  progress.textContent = label;
  if (busyCount === 1) busyTimer = setTimeout(() => { progress.hidden = false; }, PROGRESS_DELAY_MS);
  try {
    return await task();
  } finally {
    busyCount -= 1;
    if (button) button.disabled = false;
    if (busyCount === 0) {
      clearTimeout(busyTimer);
      progress.hidden = true;
    }
  }
}

// busy() for a Compute button.
export async function whileBusy(button, task) {
  return busy(task, "Computing…", button);
}

// The lines of a textarea, trimmed, without the empty ones.
export function nonEmptyLines(text) {
  return text.split("\n").map((line) => line.trim()).filter((line) => line.length > 0);
}

// A number field's value as sent: a number when the trimmed text parses as one, else the
// text as typed ("" included), so that the API's error names the field.
export function parseNumber(raw) {
  const text = raw.trim();
  return text === "" || Number.isNaN(Number(text)) ? text : Number(text);
}

// A new <option>.
export function option(value, text) {
  const element = document.createElement("option");
  element.value = value;
  element.textContent = text;
  return element;
}

// The selected index of a <select> filled by fillIndexSelect (0 while empty).
export function selectedIndex(select) {
  return Number(select.value || 0);
}

// Fill `select` with one option per label (value "i", text labels[i]); the selected
// index stays when the new options still have it, else the first is selected.
export function fillIndexSelect(select, labels) {
  const previous = selectedIndex(select);
  select.replaceChildren(...labels.map((text, i) => option(String(i), text)));
  select.value = String(previous < labels.length ? previous : 0);
}

// A <p class="`className`"> of `text` appended to `container`; returns it.
export function paragraph(container, className, text) {
  const element = document.createElement("p");
  element.className = className;
  element.textContent = text;
  container.append(element);
  return element;
}
