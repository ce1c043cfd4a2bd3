// The views of /models (VIEWS), each drawn by its own module under views/, named after its
// key: a new view is one module there, one entry here and one tab in templates/models.html.
import { renderAtlas } from "./views/atlas.js";
import { renderAverages } from "./views/averages.js";
import { renderCompare } from "./views/compare.js";
import { renderGeneration } from "./views/generation.js";
import { renderLayerView } from "./views/layer.js";
import { renderLineView } from "./views/lines.js";
import { modelWatcher, renderModelView } from "./views/model.js";
import { renderNeuronView } from "./views/neuron.js";

// The views of /models, one entry each, as `/` has its VIEWS (lessons.js): how a view is
// drawn, render(section, ctx) with ctx = { res: the overview, layer: the selected layer,
// watcher: the streamed grid's, ticket }, and what it shows around its maps. Defaults:
// drawn from the overview of the selected input, the shared token strip above it, the
// layer select and "hide special tokens" apply, no outlines, not streamed. `streamed`: the
// watcher (section, ticket) of the streamed overview that paints its layers as they come.
const VIEW_DEFAULTS = {
  overview: true, ownTokens: false, outlined: false, layerControl: true, hideSpecial: true,
  streamed: null,
};
// In the order of the tabs (templates/models.html; a test checks).
export const VIEWS = Object.fromEntries(Object.entries({
  model: {
    render: (section, ctx) => renderModelView(section, ctx.res, ctx.watcher),
    outlined: true, layerControl: false, streamed: modelWatcher,
  },
  layer: { render: (section, ctx) => renderLayerView(section, ctx.res, ctx.layer), outlined: true },
  averages: {
    render: (section, ctx) => renderAverages(section, ctx.res, ctx.layer), outlined: true,
  },
  // Compare shows two inputs, the neuron view its own strip (every token).
  compare: { render: (section, ctx) => renderCompare(section, ctx.res, ctx.layer), ownTokens: true },
  lines: { render: (section, ctx) => renderLineView(section, ctx.res, ctx.layer) },
  neuron: {
    render: (section, ctx) => renderNeuronView(section, ctx.res, ctx.layer), ownTokens: true,
  },
  // Generation draws itself (the token explorer), not from the overview.
  generation: {
    render: (section, ctx) => renderGeneration(section, ctx.ticket),
    overview: false, ownTokens: true, layerControl: false, hideSpecial: false,
  },
  // The head atlas: every head scored over a corpus (atlas.js), not from the overview.
  atlas: {
    render: (section, ctx) => renderAtlas(section, ctx.ticket),
    overview: false, ownTokens: true, layerControl: false, hideSpecial: false,
    busyLabel: "Scoring the heads…", // it generates nothing
  },
}).map(([name, view]) => [name, { ...VIEW_DEFAULTS, ...view }]));
