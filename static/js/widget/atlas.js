// AttnViz's head atlas in a notebook (attnviz.atlas_view): the page's atlas (../atlas.js:
// one layers x heads map per score, the sortable table of the top heads) as an anywidget
// module. attnviz.views.bundle bundles it with the modules it imports into the widget's
// _esm. The model (synced with Python: attnviz.views.widget.AtlasWidget): atlas (POST
// /api/v1/models/heads's JSON), head ([layer, head] clicked, [] none), _plotly_js (see
// plotly.js). The root (.attnviz-widget) says data-drawn ("true" once drawn) and data-head.

import { loadPlotly } from "./plotly.js"; // first: evaluated before draw.js (see plotly.js)
import { drawAtlas } from "../atlas.js";

function render({ model, el }) {
  const root = document.createElement("div");
  root.className = "attnviz-widget attnviz-atlas";
  root.dataset.drawn = "false";
  const chosen = document.createElement("p");
  chosen.className = "hint atlas-head";
  chosen.setAttribute("role", "status");
  const body = document.createElement("div");
  root.append(chosen, body);
  el.append(root);

  const showHead = () => {
    const head = model.get("head") || [];
    root.dataset.head = head.join(".");
    chosen.textContent = head.length === 2
      ? `Chosen: layer ${head[0]}, head ${head[1]} (the widget's head in Python).`
      : "Click a head, in a map or in the table: the widget's head becomes [layer, head].";
  };
  const draw = async () => {
    root.dataset.drawn = "false";
    try {
      await loadPlotly(model);
      await drawAtlas(body, model.get("atlas"), (layer, head) => {
        model.set("head", [layer, head]);
        model.save_changes();
      });
      root.dataset.drawn = "true";
    } catch (error) {
      root.dataset.drawn = "error";
      chosen.textContent = String(error.message || error);
    }
  };
  model.on("change:head", showHead);
  model.on("change:atlas", draw);
  showHead();
  draw();
  return () => {
    model.off("change:head", showHead);
    model.off("change:atlas", draw);
  };
}

export default { render };
