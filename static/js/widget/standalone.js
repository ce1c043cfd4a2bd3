// AttnViz's widget module without Jupyter: in the HTML files AttentionView.save() writes
// and in a notebook's HTML outputs (nbconvert, nbviewer), a model of its own stands in for
// the kernel's (attnviz.views.interactive writes the page; this file is its one module
// script, the same on every page).
//
// Each <script type="application/json" class="attnviz-widget-data"> holds
//   {host, esm, css, state, buffers}:
// the id of the element to draw into, the widget's module (its _esm) and CSS, and the
// model's state, where the keys listed in `buffers` are base64 and are read back as a
// DataView, as Jupyter's widget manager hands binary traits to a widget. The module is run
// as anywidget runs it (imported from a blob: URL); the model keeps its state here: what
// the page sets is drawn, and nothing is sent anywhere. The host element gets the model as
// `host.attnvizModel` (tests read its state).

function base64View(text) {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
  return new DataView(bytes.buffer);
}

// The part of anywidget's model interface the widget uses: get, set, save_changes, on,
// off, send. As Backbone's, set emits "change:<key>" (and "change") when the value changes.
function standaloneModel(state) {
  const handlers = new Map();
  const emit = (event, value) => {
    for (const handler of [...(handlers.get(event) || [])]) handler(value);
  };
  const same = (a, b) => a === b || JSON.stringify(a) === JSON.stringify(b);
  return {
    get: (key) => state[key],
    set(key, value) {
      if (same(state[key], value)) return;
      state[key] = value;
      emit(`change:${key}`, value);
      emit("change", value);
    },
    save_changes() {},
    on(event, handler) {
      if (!handlers.has(event)) handlers.set(event, new Set());
      handlers.get(event).add(handler);
    },
    off(event, handler) {
      if (!event) handlers.clear();
      else if (!handler) handlers.delete(event);
      else if (handlers.has(event)) handlers.get(event).delete(handler);
    },
    send() {}, // no kernel
  };
}

function addCss(css) {
  if (!css || document.getElementById("attnviz-widget-css")) return;
  const style = document.createElement("style");
  style.id = "attnviz-widget-css";
  style.textContent = css;
  document.head.append(style);
}

async function start(node) {
  const data = JSON.parse(node.textContent);
  const host = document.getElementById(data.host);
  try {
    const state = { ...data.state };
    for (const key of data.buffers || []) state[key] = base64View(state[key]);
    addCss(data.css);
    const url = URL.createObjectURL(new Blob([data.esm], { type: "text/javascript" }));
    let module;
    try {
      module = await import(url);
    } finally {
      URL.revokeObjectURL(url);
    }
    const widget = typeof module.default === "function" ? await module.default() : module.default;
    const model = standaloneModel(state);
    host.attnvizModel = model;
    if (widget.initialize) await widget.initialize({ model });
    await widget.render({ model, el: host });
  } catch (error) {
    host.textContent = `AttnViz could not draw this view: ${error.message}`;
    throw error;
  }
}

for (const node of document.querySelectorAll("script.attnviz-widget-data:not([data-started])")) {
  node.dataset.started = "true";
  start(node);
}
