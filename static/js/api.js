// What both pages share (/ : attnviz.js and lessons.js; /models: models.js), one copy
// each: the requests to the API and the decoding of their typed arrays, the error box,
// the progress indicator, reading the form (lines, numbers), filling <select>s, the
// tabs, the shared links and the download buttons. heatmap.js draws the figures.

// ---------------------------------------------------------------------------
// Requests.

// Ask the API for its arrays as base64 float32 typed arrays (decoded by fetchJson).
export const COMPACT = { encoding: "base64_float32" };

// The seeded layer's fields, as the API names them (LayerRequest in the schemas).
export const LAYER_FIELDS = ["d_model", "num_heads", "seed", "pad_id", "vocab_size", "device"];

// The label of a padding position (the engine's PAD_LABEL).
export const PAD_LABEL = "<pad>";

// Heatmaps on / are block-pooled by the server to at most this many rows and columns.
export const DISPLAY_SIZE = 128;

// A validation error's location without "body"/"query": ["body", "texts", 0] -> "texts[0]".
function formatLoc(loc) {
  return loc
    .filter((part, i) => !(i === 0 && (part === "body" || part === "query")))
    .map((part, i) => (typeof part === "number" ? `[${part}]` : (i === 0 ? part : `.${part}`)))
    .join("");
}

// POST `body` as JSON, or as a multipart form when it is FormData (an upload), or GET
// without one, and decode typed arrays. On an HTTP error the API's message, one
// "<field>: <message>" line per error, goes to showError and the result is null; so
// does "Request failed: ..." when the request does not complete.
async function fetchJson(url, body, showError) {
  let init = {};
  if (body instanceof FormData) init = { method: "POST", body };
  else if (body !== undefined) {
    init = { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
  }
  try {
    const response = await fetch(url, init);
    const data = decodeArrays(await response.json().catch(() => null));
    if (!response.ok) {
      const detail = data && data.detail;
      showError(Array.isArray(detail)
        ? detail.map((d) => `${formatLoc(d.loc || [])}: ${d.msg}`).join("\n")
        : String(detail || `HTTP ${response.status}`));
      return null;
    }
    return data;
  } catch (err) {
    showError(`Request failed: ${err}`);
    return null;
  }
}

// The page's fetch: (url, body) -> the decoded response, or null once showError(message)
// has been called (see fetchJson).
export function jsonFetcher(showError) {
  return (url, body) => fetchJson(url, body, showError);
}

// ---------------------------------------------------------------------------
// Typed arrays. The API sends arrays as Plotly.js's typed-array spec
// {dtype, bdata (base64), shape} when asked to (COMPACT); fetchJson turns them back into
// nested arrays.

function base64Bytes(text) {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

function halfToFloat(bits) {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >> 10) & 0x1f;
  const fraction = bits & 0x3ff;
  if (exponent === 0) return sign * 2 ** -14 * (fraction / 1024);
  if (exponent === 31) return fraction ? NaN : sign * Infinity;
  return sign * 2 ** (exponent - 15) * (1 + fraction / 1024);
}

// {dtype, bdata, shape} -> nested arrays; NaN -> null (a masked entry), u1 -> booleans.
function decodeTypedArray(spec) {
  const bytes = base64Bytes(spec.bdata);
  let flat;
  if (spec.dtype === "f4") {
    flat = new Float32Array(bytes.buffer);
  } else if (spec.dtype === "f8") {
    flat = new Float64Array(bytes.buffer);
  } else if (spec.dtype === "f2") {
    const halves = new Uint16Array(bytes.buffer);
    flat = new Float32Array(halves.length);
    for (let i = 0; i < halves.length; i += 1) flat[i] = halfToFloat(halves[i]);
  } else {
    flat = bytes;
  }
  const boolean = spec.dtype === "u1";
  const shape = spec.shape;
  function build(offset, axis) {
    const size = shape[axis];
    if (axis === shape.length - 1) {
      const row = new Array(size);
      for (let i = 0; i < size; i += 1) {
        const v = flat[offset + i];
        row[i] = boolean ? v !== 0 : (Number.isNaN(v) ? null : v);
      }
      return row;
    }
    const stride = shape.slice(axis + 1).reduce((a, b) => a * b, 1);
    return Array.from({ length: size }, (_, i) => build(offset + i * stride, axis + 1));
  }
  return shape.length === 0 ? [] : build(0, 0);
}

// Replace every typed-array spec in an API response by nested arrays, in place.
export function decodeArrays(value) {
  if (value === null || typeof value !== "object" || Array.isArray(value)) return value;
  if (typeof value.bdata === "string" && Array.isArray(value.shape)) return decodeTypedArray(value);
  for (const key of Object.keys(value)) value[key] = decodeArrays(value[key]);
  return value;
}

// ---------------------------------------------------------------------------
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

// ---------------------------------------------------------------------------
// Tabs. Each button of .tabs (data-view=<name>) opens its panel, #view-<name>. The open
// tab travels in the URL as #view=<name> (writeUrlState): a bare #<name> could be an
// element's id (#heads, #summary, #model), which the browser scrolls to.

function tabButtons() {
  return [...document.querySelectorAll(".tabs button")];
}

// Select the tab of `view` and show its panel only.
export function openTab(view) {
  for (const tab of tabButtons()) {
    const active = tab.dataset.view === view;
    tab.setAttribute("aria-selected", String(active));
    document.getElementById(`view-${tab.dataset.view}`).hidden = !active;
  }
}

// Call onSelect(view) when a tab is clicked.
export function onTabClick(onSelect) {
  for (const tab of tabButtons()) {
    tab.addEventListener("click", () => onSelect(tab.dataset.view));
  }
}

// The view the URL's fragment names ("#view=<name>", or an old link's "#<name>"), or
// `fallback` when it names no tab. An old link's bare fragment becomes #view=<name> at
// once, before the browser scrolls to the element of that id.
export function viewFromUrl(fallback) {
  const { hash } = window.location;
  const name = fragmentParams().get("view") ?? "";
  const view = tabButtons().some((tab) => tab.dataset.view === name) ? name : fallback;
  if (hash === `#${view}`) {
    const url = new URL(window.location.href);
    url.hash = `view=${view}`;
    window.history.replaceState(null, "", url);
  }
  return view;
}

// The fragment's parameters: "#view=layer&scale=row" or an old link's bare "#layer".
function fragmentParams() {
  const hash = window.location.hash.slice(1);
  return new URLSearchParams(hash.includes("=") ? hash : `view=${hash}`);
}

// ---------------------------------------------------------------------------
// The open view's settings travel in the fragment after the tab, those that differ from
// the page's defaults only:
//
//   #view=<name>&scale=<colour scale>&tokens=<selected positions, q,q,…>&sequence=<b>
//     &layer=<l>&head=<h>&method=<the /models method>&ablate=<its heads off, l.h,l.h>
//
// A setting that is malformed, or names an option the page does not have, is ignored.
const LINK_SETTINGS = {
  scale: /^[a-z]{1,16}$/,
  tokens: /^\d{1,6}(,\d{1,6}){0,255}$/,
  sequence: /^\d{1,4}$/,
  layer: /^\d{1,4}$/,
  head: /^\d{1,4}$/,
  method: /^[a-z_]{1,20}$/,
  target: /^\d{1,6}$/,
  ablate: /^\d{1,3}\.\d{1,3}(,\d{1,3}\.\d{1,3}){0,511}$/,
};
let linkSettings = () => ({});

// The well-formed settings of the URL's fragment: {name: string}.
export function settingsFromUrl() {
  const params = fragmentParams();
  const settings = {};
  for (const [name, pattern] of Object.entries(LINK_SETTINGS)) {
    const value = params.get(name);
    if (value !== null && pattern.test(value)) settings[name] = value;
  }
  return settings;
}

// The selected positions of a link's `tokens` setting ("2,5"): a Set of integers.
export function linkedTokens(value) {
  return new Set(value ? value.split(",").map(Number) : []);
}

// Select `value` (a link's setting) in `select` when it is one of its options; true if so.
export function selectLinked(select, value) {
  if (value === undefined || ![...select.options].some((o) => o.value === value)) return false;
  select.value = value;
  return true;
}

// The page's settings for the link: read() returns {name: value}; a null, undefined or
// empty value (the page's default) is left out.
export function bindLinkSettings(read) {
  linkSettings = read;
}

function fragmentFor(view) {
  const params = new URLSearchParams({ view });
  for (const [name, value] of Object.entries(linkSettings())) {
    if (value !== null && value !== undefined && value !== "") params.set(name, String(value));
  }
  return params.toString().replaceAll("%2C", ",");
}

// Write the open tab and the view's settings into the URL's fragment (the request, in
// the query string, stays as it is).
export function writeLinkSettings(view) {
  const url = new URL(window.location.href);
  const hash = fragmentFor(view);
  if (url.hash === `#${hash}`) return;
  url.hash = hash;
  window.history.replaceState(null, "", url);
}

// ---------------------------------------------------------------------------
// Shared links. A page's request and open tab travel in the URL:
//
//   ?request=<base64url of the request's JSON, deflate-raw compressed>#view=<view>
//
// (#view=<name>, not a bare #<name>: see Tabs above. Both pages still open old links'
// bare #<name>, viewFromUrl.)
// The browser's own CompressionStream compresses the JSON (a 2000-token input is a few
// KB instead of tens). Old links with the plain JSON (?request={...}) still open. A link
// longer than MAX_LINK_CHARS is not written: the page says so in #link-note and points
// to Download JSON. A link that cannot be read (not base64url, cut short, not JSON, a
// field of the wrong type, a key such as __proto__) is refused with a message in
// #link-note, and the page starts from its default input.

// The longest link the pages write, in characters of the whole URL. uvicorn refuses a
// request line over 64 KiB (HTTP 400), and every current browser opens 32 KiB.
const MAX_LINK_CHARS = 32 * 1024;
// The most bytes of JSON a link may expand to (the API's default body limit, 4 MiB):
// a hostile link cannot make the page inflate gigabytes.
const MAX_LINK_JSON_BYTES = 4 * 2 ** 20;
const FORBIDDEN_KEYS = new Set(["__proto__", "constructor", "prototype"]);

class LinkError extends Error {}

// The state of the link, for tests and scripts: <html data-link="pending" | "written" |
// "too-large" | "unreadable">.
function setLinkState(value) {
  document.documentElement.dataset.link = value;
}

function linkNote(message, reason) {
  const note = document.getElementById("link-note");
  if (!note) return;
  if (message === null) {
    if (note.dataset.reason === reason) {
      note.hidden = true;
      note.textContent = "";
      delete note.dataset.reason;
    }
    return;
  }
  note.textContent = message;
  note.dataset.reason = reason;
  note.hidden = false;
}

function toBase64Url(bytes) {
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function fromBase64Url(text) {
  if (!/^[A-Za-z0-9_-]+$/.test(text) || text.length % 4 === 1) {
    throw new LinkError("its request is neither JSON nor base64url");
  }
  return base64Bytes(text.replace(/-/g, "+").replace(/_/g, "/"));
}

// `bytes` through a (de)compression stream; at most `limit` bytes come out.
async function transform(bytes, stream, limit = Infinity) {
  const reader = new Blob([bytes]).stream().pipeThrough(stream).getReader();
  const chunks = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.length;
    if (total > limit) {
      await reader.cancel();
      throw new LinkError(`its request expands to more than ${limit} bytes`);
    }
    chunks.push(value);
  }
  const out = new Uint8Array(total);
  let offset = 0;
  for (const chunk of chunks) {
    out.set(chunk, offset);
    offset += chunk.length;
  }
  return out;
}

async function encodeRequest(request) {
  const json = JSON.stringify(request);
  if (typeof CompressionStream === "undefined") return json; // old browsers: plain JSON
  const bytes = new TextEncoder().encode(json);
  return toBase64Url(await transform(bytes, new CompressionStream("deflate-raw")));
}

async function decodeRequest(raw) {
  if (/^\s*[[{]/.test(raw)) return raw; // an old link: the JSON itself
  const compressed = fromBase64Url(raw);
  if (typeof DecompressionStream === "undefined") {
    throw new LinkError("this browser cannot decompress links (no DecompressionStream)");
  }
  let bytes;
  try {
    bytes = await transform(compressed, new DecompressionStream("deflate-raw"),
      MAX_LINK_JSON_BYTES);
  } catch (err) {
    if (err instanceof LinkError) throw err;
    throw new LinkError("its request is cut short or damaged (it does not decompress)");
  }
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw new LinkError("its request is not UTF-8 text");
  }
}

function describeValue(value) {
  const text = JSON.stringify(value) ?? String(value);
  return text.length > 40 ? `${text.slice(0, 40)}…` : text;
}

// The request of a link's JSON, checked against `fields` (below). Raises LinkError.
function parseRequest(text, fields) {
  let request;
  try {
    request = JSON.parse(text, (key, value) => {
      if (FORBIDDEN_KEYS.has(key)) throw new LinkError(`its request has the key "${key}"`);
      return value;
    });
  } catch (err) {
    if (err instanceof LinkError) throw err;
    throw new LinkError("its request is not valid JSON");
  }
  if (request === null || typeof request !== "object" || Array.isArray(request)) {
    throw new LinkError(`its request is ${describeValue(request)}, not a JSON object`);
  }
  const problems = [];
  for (const [name, field] of Object.entries(fields)) {
    if (!Object.hasOwn(request, name)) {
      if (field.required) problems.push(`${name} is missing`);
    } else if (!field.check(request[name])) {
      problems.push(`${name} must be ${field.expected}, not ${describeValue(request[name])}`);
    }
  }
  if (problems.length) throw new LinkError(problems.join("; "));
  return request;
}

const isNumber = (v) => typeof v === "number" && Number.isFinite(v);
const isString = (v) => typeof v === "string";
const isBoolean = (v) => typeof v === "boolean";
const isTokens = (v) => isString(v) || (Array.isArray(v) && v.every(Number.isInteger));
const isBatch = (v) => Array.isArray(v) && v.length > 0 && v.every(isTokens);

function field(check, expected, required = false) {
  return { check, expected, required };
}

// The fields a link to / may carry, and their types (JSON names, as the API's).
export const ATTENTION_LINK_FIELDS = {
  sequences: field(isBatch, "a non-empty list of token-id lists or strings", true),
  targets: field(isBatch, "a non-empty list of token-id lists or strings"),
  d_model: field(isNumber, "a number"),
  num_heads: field(isNumber, "a number"),
  seed: field(isNumber, "a number"),
  pad_id: field(isNumber, "a number"),
  vocab_size: field(isNumber, "a number"),
  device: field(isString, "a string"),
  mask: field(isString, "a string"),
  mask_fill: field((v) => isNumber(v) || v === "-inf", 'a number or "-inf"'),
  scale: field(isBoolean, "true or false"),
  verify: field(isBoolean, "true or false"),
};

// The fields a link to /models may carry.
export const MODELS_LINK_FIELDS = {
  texts: field((v) => Array.isArray(v) && v.length > 0 && v.every(isString),
    "a non-empty list of strings", true),
  text_pairs: field((v) => Array.isArray(v) && v.every((p) => p === null || isString(p)),
    "a list of strings or nulls"),
  model: field((v) => v === null || isString(v), "a string"),
  device: field(isString, "a string"),
  chat: field((v) => typeof v === "boolean", "true or false"),
  max_new_tokens: field((v) => Number.isInteger(v) && v >= 0 && v <= 64, "an integer 0-64"),
  temperature: field((v) => typeof v === "number" && v >= 0 && v <= 10, "a number 0-10"),
  seed: field((v) => Number.isInteger(v) && v >= 0, "an integer >= 0"),
  targets: field((v) => Array.isArray(v) && v.every(isString), "a list of strings"),
  block: field((v) => ["encoder", "decoder", "cross"].includes(v), "encoder, decoder or cross"),
};

let linkWrites = 0; // the latest write wins when compressions overlap
let unreadableShown = false;

// Write `request`, the open tab `view` (as #view=<view>) and the view's settings into the
// URL (history.replaceState), or, when the link would be longer than MAX_LINK_CHARS, drop
// the request from the URL and say so in #link-note. Resolves when done.
export async function writeUrlState(request, view) {
  const ticket = (linkWrites += 1);
  setLinkState("pending");
  const encoded = await encodeRequest(request);
  if (ticket !== linkWrites) return;
  const url = new URL(window.location.href);
  url.searchParams.set("request", encoded);
  url.hash = fragmentFor(view);
  // The message about an unreadable link stays up for the page's first computation.
  if (unreadableShown) unreadableShown = false;
  else linkNote(null, "unreadable");
  if (url.href.length > MAX_LINK_CHARS) {
    const chars = url.href.length;
    url.searchParams.delete("request");
    window.history.replaceState(null, "", url);
    linkNote(`This input is too large to share as a link (${chars.toLocaleString()} ` +
      `characters compressed; links stop at ${MAX_LINK_CHARS.toLocaleString()}). The address ` +
      "bar no longer carries it: use Download JSON to save the request instead.", "too-large");
    setLinkState("too-large");
    return;
  }
  window.history.replaceState(null, "", url);
  linkNote(null, "too-large");
  setLinkState("written");
}

// The request of the URL, checked against `fields` (ATTENTION_LINK_FIELDS or
// MODELS_LINK_FIELDS); null when the URL has none. A link that cannot be read gives
// null too, and a message in #link-note naming what is wrong.
export async function readUrlRequest(fields) {
  const raw = new URL(window.location.href).searchParams.get("request");
  if (raw === null) return null;
  try {
    return parseRequest(await decodeRequest(raw), fields);
  } catch (err) {
    const reason = err instanceof LinkError ? err.message : `it could not be read (${err})`;
    linkNote(`This link could not be opened: ${reason}. The page starts from its ` +
      "default input instead.", "unreadable");
    unreadableShown = true;
    setLinkState("unreadable");
    return null;
  }
}

// ---------------------------------------------------------------------------
// Downloads. Download JSON (#download-json) saves `payload()` ({request, response}; null
// while there is nothing to save) as <prefix>.json; Download PNG and Download SVG
// (#download-png, #download-svg) save the first figure of the open view with Plotly's
// own toImage. `currentView()` names the open view (its section is #view-<name>); image
// files are called <prefix>-<view>.<format>.
export function bindDownloads(prefix, currentView, payload) {
  document.getElementById("download-json").addEventListener("click", () => {
    const content = payload();
    if (!content) return;
    download(`${prefix}.json`, new Blob([JSON.stringify(content)], { type: "application/json" }));
  });
  for (const format of ["png", "svg", "pdf"]) {
    const button = document.getElementById(`download-${format}`);
    if (!button) continue;
    button.addEventListener("click", async () => {
      const view = currentView();
      const plot = document.querySelector(`#view-${view} .js-plotly-plot`);
      if (!plot) return;
      if (format !== "pdf") {
        Plotly.downloadImage(plot, { format, filename: `${prefix}-${view}` });
        return;
      }
      // Plotly.js exports no PDF: its JPEG (2 pixels a CSS px) on a page of the figure's size.
      const scale = 2;
      const { width, height } = plot._fullLayout;
      // A JPEG has no transparency: the figure on the page's panel colour.
      const style = getComputedStyle(document.documentElement);
      const background = style.getPropertyValue("--panel").trim() || "#ffffff";
      const figure = { data: plot.data, layout: { ...plot.layout, paper_bgcolor: background } };
      const url = await Plotly.toImage(figure, { format: "jpeg", width, height, scale });
      const jpeg = Uint8Array.from(atob(url.split(",")[1]), (c) => c.charCodeAt(0));
      const blob = pdfOfJpeg(jpeg, width * scale, height * scale, width * 0.75, height * 0.75);
      download(`${prefix}-${view}.pdf`, blob);
    });
  }
}

// A one-page PDF 1.4 (ISO 32000-1, 7.5) showing a JPEG (DCTDecode) of `pixelsWide` x
// `pixelsHigh` over the whole page of `pointsWide` x `pointsHigh` (1/72 in).
export function pdfOfJpeg(jpeg, pixelsWide, pixelsHigh, pointsWide, pointsHigh) {
  const encoder = new TextEncoder();
  const parts = [];
  const offsets = [];
  let length = 0;
  const add = (part) => {
    const bytes = typeof part === "string" ? encoder.encode(part) : part;
    parts.push(bytes);
    length += bytes.length;
  };
  const object = (number, body) => {
    offsets[number] = length;
    add(`${number} 0 obj\n${body}\nendobj\n`);
  };
  const [w, h] = [pointsWide.toFixed(2), pointsHigh.toFixed(2)];
  const content = `q ${w} 0 0 ${h} 0 0 cm /Im0 Do Q`;
  add("%PDF-1.4\n%\u00e2\u00e3\u00cf\u00d3\n");
  object(1, "<< /Type /Catalog /Pages 2 0 R >>");
  object(2, "<< /Type /Pages /Kids [3 0 R] /Count 1 >>");
  object(3, `<< /Type /Page /Parent 2 0 R /MediaBox [0 0 ${w} ${h}] ` +
    "/Resources << /XObject << /Im0 4 0 R >> >> /Contents 5 0 R >>");
  offsets[4] = length;
  add(`4 0 obj\n<< /Type /XObject /Subtype /Image /Width ${Math.round(pixelsWide)} ` +
    `/Height ${Math.round(pixelsHigh)} /ColorSpace /DeviceRGB /BitsPerComponent 8 ` +
    `/Filter /DCTDecode /Length ${jpeg.length} >>\nstream\n`);
  add(jpeg);
  add("\nendstream\nendobj\n");
  object(5, `<< /Length ${content.length} >>\nstream\n${content}\nendstream`);
  const xref = length;
  const rows = offsets.slice(1).map((at) => `${String(at).padStart(10, "0")} 00000 n \n`);
  add(`xref\n0 6\n0000000000 65535 f \n${rows.join("")}`);
  add(`trailer\n<< /Size 6 /Root 1 0 R >>\nstartxref\n${xref}\n%%EOF\n`);
  return new Blob(parts, { type: "application/pdf" });
}

// Save `blob` as a file called `name`.
function download(name, blob) {
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = name;
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}
