// Requests to the API: JSON in, the decoded response out (lib/arrays.js), a validation
// error's message with the field it names.
// (Shared by both pages through ../api.js.)

import { decodeArrays } from "./arrays.js";

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

// An API error's JSON answer (`data`, null when the body was not JSON) as the error box
// shows it: one "<field>: <message>" line per error, else its detail, else the HTTP status
// (a server error that is not the API's: a proxy's, or a Ray Serve replica that stopped
// while it computed, says to try again).
export function errorText(data, status) {
  const detail = data && data.detail;
  if (!detail && status >= 500) {
    return `HTTP ${status}: the server failed before it answered, without the API's ` +
      "message (a worker or replica that stopped while it computed?). Try again; if it " +
      "fails again, it is a bug worth reporting.";
  }
  if (!Array.isArray(detail)) return String(detail || `HTTP ${status}`);
  return detail.map((d) => `${formatLoc(d.loc || [])}: ${d.msg}`).join("\n");
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
      showError(errorText(data, response.status));
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
