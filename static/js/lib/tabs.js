// Tabs, and the open view's settings in the URL's fragment.
// (Shared by both pages through ../api.js.)

// Tabs. Each button of .tabs (data-view=<name>) opens its panel, #view-<name>. The open
// tab travels in the URL as #view=<name> (writeUrlState): a bare #<name> could be an
// element's id (#heads, #summary, #model), which the browser scrolls to.
//
// The keyboard follows the WAI-ARIA Authoring Practices' Tabs pattern, with automatic
// activation: the tab list is one stop of the Tab key (a roving tabindex: the selected tab
// 0, the others -1), Left and Right arrow move to the previous and next tab (wrapping),
// Home and End to the first and last, and the tab reached opens as a click would.

function tabButtons() {
  return [...document.querySelectorAll(".tabs button")];
}

// Select the tab of `view` and show its panel only.
export function openTab(view) {
  for (const tab of tabButtons()) {
    const active = tab.dataset.view === view;
    tab.setAttribute("aria-selected", String(active));
    tab.tabIndex = active ? 0 : -1;
    document.getElementById(`view-${tab.dataset.view}`).hidden = !active;
  }
}

// The tab a key moves to from `tab` among `tabs` (the list's tabs in order), or null
// for a key that moves nothing.
function tabForKey(tabs, tab, key) {
  const at = tabs.indexOf(tab);
  if (at < 0) return null;
  if (key === "ArrowRight") return tabs[(at + 1) % tabs.length];
  if (key === "ArrowLeft") return tabs[(at - 1 + tabs.length) % tabs.length];
  if (key === "Home") return tabs[0];
  if (key === "End") return tabs[tabs.length - 1];
  return null;
}

// Call onSelect(view) when a tab is clicked, or reached by its list's arrow keys, Home or
// End (the focus moves to it). Each tab names its panel (aria-controls), each panel its
// tab (aria-labelledby).
export function bindTabs(onSelect) {
  for (const tab of tabButtons()) {
    tab.id ||= `tab-${tab.dataset.view}`;
    const panel = document.getElementById(`view-${tab.dataset.view}`);
    tab.setAttribute("aria-controls", panel.id);
    panel.setAttribute("aria-labelledby", tab.id);
    tab.addEventListener("click", () => onSelect(tab.dataset.view));
  }
  for (const list of document.querySelectorAll(".tabs")) {
    list.addEventListener("keydown", (event) => {
      if (event.altKey || event.ctrlKey || event.metaKey || event.shiftKey) return;
      const tabs = [...list.querySelectorAll("button")].filter((t) => !t.hidden && !t.disabled);
      const next = tabForKey(tabs, event.target, event.key);
      if (!next) return;
      event.preventDefault(); // Home and End would scroll the page
      next.focus();
      if (next.getAttribute("aria-selected") !== "true") onSelect(next.dataset.view);
    });
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
//     &layer=<l>&head=<h>&method=<the /models method>&target=<its target token>
//     &ablate=<its heads off, l.h,l.h>&query=<the token explorer's token>
//
// A setting that is malformed, or names an option the page does not have, is ignored.
const LINK_SETTINGS = {
  scale: /^[a-z]{1,16}$/,
  tokens: /^\d{1,6}(,\d{1,6}){0,255}$/,
  sequence: /^\d{1,4}$/,
  layer: /^\d{1,4}$/,
  head: /^\d{1,4}(\.\d{1,4})?$/, // / : a head; /models: layer.head (heads.js)
  method: /^[a-z_]{1,20}$/,
  target: /^\d{1,6}$/,
  query: /^\d{1,6}$/, // /models' token explorer: the token picked
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

export function fragmentFor(view) {
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
