// Plotly helpers shared by every view: one map as a heatmap figure, drawing figures,
// and the three grid renderers (thumbnailGrid, tiledGrid, thumbnailPreview). Token labels
// are user text: they reach Plotly only with & < > escaped as entities.
//
// One module per concern under plots/; this file re-exports them.

export * from "./plots/figure.js";
export * from "./plots/draw.js";
export * from "./plots/thumbnails.js";
export * from "./plots/tiles.js";
export * from "./plots/preview.js";
