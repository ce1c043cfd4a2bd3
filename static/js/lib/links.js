// Shared links: a page's request and open tab, compressed into the URL.
// (Shared by both pages through ../api.js.)

import { base64Bytes } from "./arrays.js";
import { fragmentFor } from "./tabs.js";

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
  // A prompt's image is no part of a link (it would outgrow any address bar).
  const { images: _images, ...shared } = request;
  const encoded = await encodeRequest(shared);
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
