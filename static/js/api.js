// JSON calls to the AttnViz API, shared by the pages.
import { decodeArrays } from "./heatmap.js";

// A validation error's location without "body"/"query": ["body", "texts", 0] -> "texts[0]".
export function formatLoc(loc) {
  return loc
    .filter((part, i) => !(i === 0 && (part === "body" || part === "query")))
    .map((part, i) => (typeof part === "number" ? `[${part}]` : (i === 0 ? part : `.${part}`)))
    .join("");
}

// POST `body` (or GET without one) and decode typed arrays. On an HTTP error the
// API's message, naming the field, goes to showError and the result is null.
export async function fetchJson(url, body, showError) {
  const init = body === undefined
    ? {}
    : { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
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

// A page's request and open tab travel in the URL (?request=<JSON>#view), so that a
// link reproduces the view.
export function writeUrlState(request, view) {
  const url = new URL(window.location.href);
  url.searchParams.set("request", JSON.stringify(request));
  url.hash = view;
  window.history.replaceState(null, "", url);
}

// The request of the URL, or null when there is none (or it is not JSON).
export function readUrlRequest() {
  const raw = new URL(window.location.href).searchParams.get("request");
  if (raw === null) return null;
  try {
    return JSON.parse(raw);
  } catch {
    return null;
  }
}

// Save `blob` as a file called `name`.
export function download(name, blob) {
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = name;
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}
