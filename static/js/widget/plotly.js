// Plotly.js for the widget's heatmaps (the model view), loaded at most once per page.
//
// plots/draw.js (through ../heatmap.js) makes its `plotlyReady` promise when it is
// evaluated: window.Plotly, else the "load" event of the page's <script id="plotly-js">
// (templates/base.html). A notebook has no such script, and draw.js would reject at once
// (an unhandled rejection in the console) and never draw. This module, imported by the
// widget BEFORE the page's modules (so evaluated before draw.js), adds a stand-in element
// of that id when Plotly is not there; loadPlotly dispatches its "load" once Plotly.js has
// run, which resolves every plotlyReady waiting on it.
//
// The line view and the token view need none of this: a saved head view carries no Plotly.

const SIGNAL_ID = "plotly-js";
const LOADING = Symbol.for("attnviz.widget.plotly"); // one load per page, across widgets
const POLL_MS = 100;

if (!window.Plotly && !document.getElementById(SIGNAL_ID)) {
  const signal = document.createElement("meta");
  signal.id = SIGNAL_ID;
  signal.name = "attnviz-plotly-ready";
  document.head.append(signal);
}

function signalReady() {
  const signal = document.getElementById(SIGNAL_ID);
  if (signal) signal.dispatchEvent(new Event("load"));
  return window.Plotly;
}

// Run Plotly.js's source (a classic script: it sets window.Plotly) from a blob: URL, as
// anywidget runs a widget's module (so it runs wherever the widget itself does).
function runSource(source) {
  return new Promise((resolve, reject) => {
    const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
    const script = document.createElement("script");
    script.src = url;
    script.addEventListener("load", () => {
      URL.revokeObjectURL(url);
      if (window.Plotly) resolve(signalReady());
      else reject(new Error("Plotly.js ran but set no window.Plotly"));
    });
    script.addEventListener("error", () => reject(new Error("Plotly.js did not load")));
    document.head.append(script);
  });
}

// Resolves to window.Plotly: the one already on the page (a saved file's <script>, or
// another output's), else the source the kernel sends as the model's `_plotly_js` when
// asked with the message {request: "plotly"} (attnviz.views.widget). Without a kernel (a
// saved file whose Plotly is missing) it rejects after `waitMs`.
export function loadPlotly(model, waitMs = 15000) {
  if (window.Plotly) return Promise.resolve(signalReady());
  if (window[LOADING]) return window[LOADING];
  const loading = new Promise((resolve, reject) => {
    let done = false;
    const finish = (action, value) => {
      if (done) return;
      done = true;
      clearInterval(poll);
      clearTimeout(timer);
      model.off("change:_plotly_js", fromKernel);
      action(value);
    };
    const fromKernel = () => {
      const source = model.get("_plotly_js");
      if (source) runSource(source).then((p) => finish(resolve, p), (e) => finish(reject, e));
    };
    const poll = setInterval(() => { if (window.Plotly) finish(resolve, signalReady()); }, POLL_MS);
    const timer = setTimeout(() => finish(reject, new Error(
      "Plotly.js is not on this page and no kernel sent it: show the view again from Python " +
      "(or save it with .save(), which embeds it)")), waitMs);
    model.on("change:_plotly_js", fromKernel);
    if (model.get("_plotly_js")) fromKernel();
    else model.send({ request: "plotly" });
  });
  window[LOADING] = loading;
  loading.catch(() => { if (window[LOADING] === loading) delete window[LOADING]; });
  return loading;
}
