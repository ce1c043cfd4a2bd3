// AttnViz's notebook views (attnviz.head_view, model_view, token_view): the page's own
// views over one attention tensor, as an anywidget module. attnviz.views.bundle bundles
// this file with the modules it imports into the widget's _esm; the HTML files .save()
// writes run the same bundle with a small model of their own (standalone.js).
//
//   head view:  tokenviews.js lineView (BertViz's head view): one layer's heads as lines
//               from the query tokens (left) to the key tokens (right), one colour per
//               head. Click a query token to select it (shift-click adds one); lineView's
//               own hovering (a token: its lines; a head: its lines on top) and head
//               toggles (click: hide or show; double-click: that head alone, again: every
//               head), whose changes are passed on to the model's `heads`.
//   model view: heatmap.js tiledGrid, every layer x head as a thumbnail (Plotly.js, which
//               plotly.js loads); a click enlarges one (heatmapFigure), where a click on a
//               row selects its query.
//   token view: tokens.js tokenStrip, the text with each key token shaded by the weight
//               the selection gives it (the mean of the heads shown, or one head).
//
// The model (synced with Python: attnviz.views.widget.AttentionWidget):
//   view ("head" | "model" | "token"), views (the tabs offered), title,
//   query_tokens, key_tokens (the tokenizer's strings, shown through displayToken),
//   shape [N, H, L_q, L_k] and _maps (N·H·L_q·L_k float32, little-endian, C order),
//   layer (the head and token views' layer), heads (the heads shown, ascending),
//   selected (the selected query positions, ascending), _plotly_js (see plotly.js).
// Every interaction sets the model (model.set, then save_changes) and every drawing follows
// the model's change events: a change from Python and a click are drawn the same way.
// Hovering only previews: it changes nothing in the model.
//
// For tests and readers, the widget's root (.attnviz-widget) says data-view (the view
// drawn) and data-drawn ("true" once drawn); lineView's lines carry data-head, data-query,
// data-key and data-weight, the token strip's chips data-weight.

import { loadPlotly } from "./plotly.js"; // first: evaluated before draw.js (see plotly.js)
import { lineView } from "../tokenviews.js";
import {
  additive, fillHeadChoice, focusToken, meanOf, nextSelection, outline, selectedWeights,
  selectionShapes, tokenStrip,
} from "../tokens.js";
import { addPlot, clearPlots, heatmapFigure, tiledGrid, tokenHover } from "../heatmap.js";
import { fillIndexSelect } from "../lib/form.js";
import { displayTokens } from "../lib/display.js";

const VIEW_TITLES = { head: "Head view", model: "Model view", token: "Token view" };
const DATA_KEYS = ["shape", "_maps", "query_tokens", "key_tokens"];

function element(name, className, text) {
  const node = document.createElement(name);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

const ascending = (values) => [...values].sort((a, b) => a - b);
const same = (a, b) => a.length === b.length && a.every((v, i) => v === b[i]);
const range = (count) => Array.from({ length: count }, (_, i) => i);

// Set several keys of the model at once and send them to the kernel.
function update(model, changes) {
  for (const [key, value] of Object.entries(changes)) model.set(key, value);
  model.save_changes();
}

// The weights of the model: layer(l) gives H x L_q x L_k nested arrays (as the page's
// views take them), decoded once per layer.
function attentionData(model) {
  const [layers, heads, lenQ, lenK] = model.get("shape");
  const raw = model.get("_maps");
  const bytes = raw instanceof ArrayBuffer
    ? new DataView(raw) : new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
  const expected = layers * heads * lenQ * lenK * 4;
  if (bytes.byteLength !== expected) {
    throw new Error(`the weights hold ${bytes.byteLength} bytes where the shape needs ${expected}`);
  }
  const decoded = new Map();
  const layer = (l) => {
    if (!decoded.has(l)) {
      decoded.set(l, range(heads).map((h) => range(lenQ).map((i) => {
        const start = ((l * heads + h) * lenQ + i) * lenK * 4;
        return range(lenK).map((j) => bytes.getFloat32(start + 4 * j, true));
      })));
    }
    return decoded.get(l);
  };
  const queries = displayTokens(model.get("query_tokens"));
  const keys = displayTokens(model.get("key_tokens"));
  // Self-attention: the keys are the queries' tokens (no target tokens were given).
  const self = lenQ === lenK && model.get("query_tokens").every((t, i) => t === model.get("key_tokens")[i]);
  return { layers, heads, lenQ, lenK, layer, queries, keys, self };
}

// The next selection after query q was clicked (null: cleared): q alone; q again alone
// clears it; with `add` (shift, ctrl or cmd) q is added or removed.
function select(ctx, q, add = false) {
  const previous = new Set(ctx.model.get("selected"));
  let next;
  if (q === null) next = new Set();
  else if (!add && previous.size === 1 && previous.has(q)) next = new Set();
  else next = nextSelection(previous, q, add);
  update(ctx.model, { selected: ascending(next) });
}

// The <select> of the layer, in the controls, when there are several layers.
function layerChoice(ctx) {
  if (ctx.data.layers < 2) return;
  const label = element("label", "aw-layer", "Layer ");
  const choice = element("select");
  fillIndexSelect(choice, range(ctx.data.layers).map((l) => String(l)));
  choice.value = String(ctx.model.get("layer"));
  choice.addEventListener("change", () => update(ctx.model, { layer: Number(choice.value) }));
  label.append(choice);
  ctx.controls.append(label);
}

// The head view ---------------------------------------------------------------------

const headView = {
  mount(ctx) {
    layerChoice(ctx);
    ctx.lines = element("div", "aw-lines");
    ctx.body.append(ctx.lines);
    ctx.visible = null;
    // lineView changes its `visible` in place (a head toggled; a double-click, or Enter,
    // keeps one head or every head) and redraws itself; its handlers run before these,
    // which pass the change on to the model.
    const sync = () => {
      if (!ctx.visible) return;
      const heads = ascending(ctx.visible);
      if (!same(heads, ctx.model.get("heads"))) update(ctx.model, { heads });
    };
    for (const type of ["change", "dblclick", "keydown"]) ctx.lines.addEventListener(type, sync);
  },
  // Whether heads from the model need a redraw: not when lineView shows them already.
  headsChanged(ctx) {
    return !ctx.visible || !same(ascending(ctx.visible), ctx.model.get("heads"));
  },
  draw(ctx) {
    const { model, data } = ctx;
    ctx.visible = new Set(model.get("heads"));
    lineView(ctx.lines, {
      queries: model.get("query_tokens"), // lineView shows them through displayToken
      keys: model.get("key_tokens"),
      maps: data.layer(model.get("layer")),
      selected: new Set(model.get("selected")),
      visible: ctx.visible,
      onSelect: (q, add) => select(ctx, q, add),
    });
  },
};

// The token view ----------------------------------------------------------------------

const tokenView = {
  mount(ctx) {
    layerChoice(ctx);
    const label = element("label", "aw-shade", "Shade by ");
    const shade = element("select");
    fillHeadChoice(shade, ctx.data.heads, "the mean of the heads shown");
    shade.value = ctx.shade ?? "mean";
    shade.addEventListener("change", () => {
      ctx.shade = shade.value;
      this.draw(ctx);
    });
    label.append(shade);
    ctx.controls.append(label);
    ctx.strips = element("div", "aw-strips");
    ctx.body.append(ctx.strips);
  },
  draw(ctx) {
    const { model, data } = ctx;
    const maps = data.layer(model.get("layer"));
    const selected = new Set(model.get("selected"));
    const heads = model.get("heads");
    let weights = null;
    if (selected.size && (ctx.shade ?? "mean") !== "mean") {
      weights = selectedWeights(maps[Number(ctx.shade)], selected);
    } else if (selected.size && heads.length) {
      weights = meanOf(heads.map((h) => selectedWeights(maps[h], selected)));
    }
    const onSelect = (box) => (q, add, keyboard) => {
      select(ctx, q, add);
      if (keyboard && q !== null) focusToken(box, q);
    };
    ctx.strips.replaceChildren();
    const strip = (title, tokens, options) => {
      const box = element("div", "aw-strip");
      box.append(element("span", "aw-strip-title", title));
      const holder = element("div");
      box.append(holder);
      ctx.strips.append(box);
      tokenStrip(holder, tokens, { ...options, onSelect: options.onSelect || onSelect(holder) });
    };
    if (data.self) {
      strip("Tokens (select one; each is shaded by the weight the selection gives it)",
        data.keys, { selected, weights });
    } else {
      strip("Queries (select one)", data.queries, { selected });
      strip("Keys (shaded by the weight the selection gives them)", data.keys, {
        selected: new Set(), weights, onSelect: () => {}, label: "Key tokens",
      });
    }
  },
};

// The model view ----------------------------------------------------------------------

const modelView = {
  mount(ctx) {
    ctx.controls.append(element("span", "aw-hint",
      "Every layer (rows) × head (columns); click a thumbnail to enlarge it, a token to outline its row."));
    ctx.strip = element("div", "aw-strip");
    ctx.grid = element("div", "aw-grid");
    ctx.enlargedBox = element("div", "aw-enlarged");
    ctx.body.append(ctx.strip, ctx.grid, ctx.enlargedBox);
    ctx.gridDiv = null;
    ctx.enlargedDiv = null;
  },
  async draw(ctx) {
    const { model, data } = ctx;
    ctx.status.textContent = window.Plotly ? "" : "Loading Plotly.js…";
    await loadPlotly(model);
    ctx.status.textContent = "";
    if (!ctx.grid.isConnected) return;
    clearPlots(ctx.grid);
    ctx.gridDiv = tiledGrid(ctx.grid, {
      rows: data.layers,
      cols: data.heads,
      cell: (r, c) => data.layer(r)[c],
      rowName: "L",
      colName: "H",
      title: "Layers × heads",
      hover: (r, c) => `layer ${r}, head ${c}`,
      queryHover: tokenHover(data.queries),
      keyHover: tokenHover(data.keys),
      onClick: (r, c) => {
        ctx.enlarged = [r, c];
        this.enlarge(ctx);
      },
    });
    await ctx.gridDiv.drawn;
    if (ctx.enlarged) await this.enlarge(ctx);
    await this.select(ctx);
  },
  async enlarge(ctx) {
    const { data } = ctx;
    const [r, c] = ctx.enlarged;
    clearPlots(ctx.enlargedBox);
    const figure = heatmapFigure({
      z: data.layer(r)[c], rowLabels: data.queries, colLabels: data.keys,
      title: `Layer ${r}, head ${c} (click a row to select its query)`, valueName: "weight",
    });
    figure.layout.height = Math.min(720, 160 + 18 * Math.max(data.lenQ, data.lenK));
    const div = addPlot(ctx.enlargedBox, figure, "plot aw-enlarged-plot");
    div.dataset.layer = String(r);
    div.dataset.head = String(c);
    ctx.enlargedDiv = div;
    await div.drawn;
    div.on("plotly_click", (event) => {
      const [i] = event.points[0].pointNumber;
      select(ctx, i, additive(event.event));
    });
    await this.select(ctx);
  },
  async select(ctx) {
    const { model, data } = ctx;
    const selected = new Set(model.get("selected"));
    tokenStrip(ctx.strip, data.queries, {
      selected, label: "Query tokens: select one to outline its row",
      onSelect: (q, add, keyboard) => {
        select(ctx, q, add);
        if (keyboard && q !== null) focusToken(ctx.strip, q);
      },
    });
    const drawn = [];
    const grid = ctx.gridDiv;
    if (grid && grid.tiles && grid.layout) {
      const { tiles } = grid;
      const shapes = [];
      for (let r = 0; r < tiles.rows; r += 1) {
        for (let c = 0; c < tiles.cols; c += 1) {
          shapes.push(...selectionShapes(selected, {
            x: tiles.x[c], y: tiles.y[r], rows: tiles.height, cols: tiles.width,
          }, false));
        }
      }
      drawn.push(outline(grid, shapes));
    }
    if (ctx.enlargedDiv && ctx.enlargedDiv.layout) {
      drawn.push(outline(ctx.enlargedDiv,
        selectionShapes(selected, { rows: data.lenQ, cols: data.lenK }, data.self)));
    }
    await Promise.all(drawn);
  },
};

const VIEWS = { head: headView, model: modelView, token: tokenView };

// anywidget's render: one view of the model in `el` (a model shown twice has two). Returns
// the cleanup anywidget calls when the view is removed.
function render({ model, el }) {
  const root = element("div", "attnviz-widget");
  const title = element("p", "aw-title");
  const tabs = element("div", "aw-tabs");
  tabs.setAttribute("role", "tablist");
  const controls = element("div", "aw-controls");
  const body = element("div", "aw-body");
  const status = element("p", "aw-status");
  status.setAttribute("role", "status");
  root.append(title, tabs, controls, body, status);
  el.replaceChildren(root);
  const ctx = { model, root, controls, body, status, data: null, mounted: null, shade: "mean", enlarged: null };
  let draws = 0;

  const drawView = async (full) => {
    const name = model.get("view");
    const view = VIEWS[name];
    const draw = ++draws;
    root.dataset.drawn = "false";
    try {
      if (!view) throw new Error(`no view ${JSON.stringify(name)}`);
      if (!ctx.data) ctx.data = attentionData(model);
      title.textContent = model.get("title") || "";
      if (full || ctx.mounted !== name) {
        tabs.replaceChildren();
        const offered = model.get("views") || [name];
        if (offered.length > 1) {
          for (const choice of offered) {
            const tab = element("button", "aw-tab", VIEW_TITLES[choice] || choice);
            tab.type = "button";
            tab.dataset.view = choice;
            tab.setAttribute("role", "tab");
            tab.setAttribute("aria-selected", String(choice === name));
            tab.addEventListener("click", () => update(model, { view: choice }));
            tabs.append(tab);
          }
        }
        if (window.Plotly) clearPlots(body);
        controls.replaceChildren();
        body.replaceChildren();
        ctx.mounted = name;
        view.mount(ctx);
      }
      await view.draw(ctx);
      if (draw !== draws) return;
      root.dataset.view = name;
      root.dataset.drawn = "true";
      status.textContent = "";
    } catch (error) {
      if (draw !== draws) return;
      status.textContent = `AttnViz could not draw this view: ${error.message}`;
      root.dataset.drawn = "error";
    }
  };
  const onData = () => { ctx.data = null; drawView(true); };
  const onView = () => drawView(false);
  // The model view draws every layer and head: the head and token views' layer and heads
  // change nothing there.
  const onLayer = () => { if (ctx.mounted !== "model") drawView(true); };
  const onHeads = () => {
    const view = VIEWS[ctx.mounted];
    if (ctx.mounted !== "model" && (!view.headsChanged || view.headsChanged(ctx))) drawView(false);
  };
  const onSelection = () => {
    const view = VIEWS[ctx.mounted];
    if (view && view.select) view.select(ctx);
    else drawView(false);
  };
  const handlers = [
    ...DATA_KEYS.map((key) => [`change:${key}`, onData]),
    ["change:view", () => drawView(true)],
    ["change:views", () => drawView(true)],
    ["change:title", onView],
    ["change:layer", onLayer], // drawn afresh: the layer <select> shows the new layer
    ["change:heads", onHeads],
    ["change:selected", onSelection],
  ];
  for (const [event, handler] of handlers) model.on(event, handler);
  root.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && !event.defaultPrevented) select(ctx, null);
  });
  drawView(true);
  return () => {
    for (const [event, handler] of handlers) model.off(event, handler);
    if (window.Plotly) clearPlots(body);
  };
}

export default { render };
