// Drawing figures: Plotly.js's readiness, plots added now or when on screen, cleared.
// (Shared by both pages through ../heatmap.js.)

import { PLOT_CONFIG, themed } from "./figure.js";

// Plotly.js (script#plotly-js) is loaded with `defer` after the page's module script
// (templates/base.html): the module runs first and sends its first request while the
// browser is still compiling Plotly.js (about 1 s on a 2-core machine). Every draw waits
// for this promise, which resolves to the Plotly object.
export const plotlyReady = new Promise((resolve, reject) => {
  if (window.Plotly) {
    resolve(window.Plotly);
    return;
  }
  const script = document.getElementById("plotly-js");
  script.addEventListener("load", () => resolve(window.Plotly));
  script.addEventListener("error", () => reject(new Error("Plotly.js did not load")));
});

// Draw a figure ({traces, layout}: a heatmapFigure, or any Plotly traces and layout) into
// a new div appended to container; returns the div, whose `drawn` promise resolves once
// Plotly has drawn it.
export function addPlot(container, figure, className = "plot") {
  const div = document.createElement("div");
  div.className = className;
  container.append(div);
  const traces = readableCells(div, figure);
  div.drawn = plotlyReady.then(async (plotly) => {
    await plotly.newPlot(div, traces, themed(figure.layout), PLOT_CONFIG);
    return dropCrampedNumbers(plotly, div, figure);
  });
  return div;
}

// addPlot's div, drawn only once div.draw(true) is called: `drawn` then resolves to the
// div as Plotly has drawn it; after div.draw(false) nothing is drawn and it resolves to
// null. drawOnScreenFirst draws a set of them.
export function addLazyPlot(container, figure, className = "plot") {
  const div = document.createElement("div");
  div.className = className;
  container.append(div);
  const wanted = new Promise((resolve) => { div.draw = resolve; });
  div.drawn = Promise.all([plotlyReady, wanted]).then(async ([plotly, draw]) => {
    if (!draw) return null;
    await plotly.newPlot(div, readableCells(div, figure), themed(figure.layout), PLOT_CONFIG);
    return dropCrampedNumbers(plotly, div, figure);
  });
  return div;
}

// Draws lazy plots (addLazyPlot) in two passes: the ones on screen at once, then the others
// one at a time, each in a task of its own, so the browser paints the first ones and stays
// responsive in between (a Plotly heatmap takes about 45 ms to draw on a 2-core machine, 12
// of them 0.55 s). A plot no longer displayed (its view closed or redrawn) is skipped.
// Resolves, once every plot is drawn or skipped, to the performance.now() time (ms) at which
// the ones on screen were drawn.
export async function drawOnScreenFirst(divs) {
  const onScreen = (div) => {
    const box = div.getBoundingClientRect();
    return box.bottom > 0 && box.top < window.innerHeight && box.width > 0;
  };
  const first = divs.filter(onScreen);
  for (const div of first) div.draw(true);
  await Promise.all(first.map((div) => div.drawn));
  const shownAt = performance.now();
  for (const div of divs) {
    if (first.includes(div)) continue;
    await new Promise((resolve) => { setTimeout(resolve, 0); });
    div.draw(div.isConnected && div.offsetParent !== null);
    await div.drawn;
  }
  return shownAt;
}

// Cell numbers are drawn at CELL_TEXT_PX; a cell narrower than MIN_CELL_PX (the div's
// width less the margins, over the columns) cannot hold "0.25" at that size, so its
// numbers are dropped (the hover still gives them). Plotly would shrink them instead.
const CELL_TEXT_PX = 11;
const MIN_CELL_PX = 30; // wide enough for "0.25"
const MIN_CELL_HEIGHT_PX = 15; // tall enough for a line of CELL_TEXT_PX

// Once drawn, the cells' real size (Plotly's axes' lengths over the columns and rows)
// decides, as readableCells estimated before the draw: a figure drawn where its width was
// not known yet (a hidden tab) or other than estimated gets its numbers dropped or back
// then. Resolves to the div.
async function dropCrampedNumbers(plotly, div, figure) {
  const layout = div._fullLayout;
  const numbered = figure.traces.map((trace, i) => (trace.texttemplate ? i : -1))
    .filter((i) => i >= 0);
  if (!figure.cells || !layout || !layout.xaxis || !numbered.length) return div;
  const fits = layout.xaxis._length / figure.cells.cols >= MIN_CELL_PX
    && layout.yaxis._length / figure.cells.rows >= MIN_CELL_HEIGHT_PX;
  const wanted = numbered.map((i) => (fits ? figure.traces[i].texttemplate : ""));
  if (numbered.some((i, k) => div.data[i].texttemplate !== wanted[k])) {
    await plotly.restyle(div, {
      texttemplate: wanted,
      textfont: numbered.map((i) => ({ size: CELL_TEXT_PX, ...(figure.traces[i].textfont || {}) })),
    }, numbered);
  }
  return div;
}

function readableCells(div, figure) {
  if (!figure.cells) return figure.traces;
  const margin = figure.layout.margin || {};
  // The width less the margins and the colour bar; the height when it is known.
  const plotWidth = div.clientWidth - (margin.l ?? 80) - (margin.r ?? 80) - 40;
  const height = figure.layout.height || div.clientHeight;
  const plotHeight = height > 0 ? height - (margin.t ?? 100) - (margin.b ?? 80) : Infinity;
  const readable = div.clientWidth === 0 || (plotWidth / figure.cells.cols >= MIN_CELL_PX
    && plotHeight / figure.cells.rows >= MIN_CELL_HEIGHT_PX);
  return figure.traces.map((trace) => {
    if (!trace.texttemplate) return trace;
    return readable
      ? { ...trace, textfont: { size: CELL_TEXT_PX, ...(trace.textfont || {}) } }
      : { ...trace, texttemplate: "" };
  });
}

export function clearPlots(container) {
  for (const node of container.querySelectorAll(".js-plotly-plot")) Plotly.purge(node);
  container.replaceChildren();
}
