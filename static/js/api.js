// What both pages share (/ : attnviz.js and lessons.js; /models: models.js), one copy
// each: the requests to the API and the decoding of their typed arrays, the error box,
// the progress indicator, reading the form (lines, numbers), filling <select>s, the
// tabs, the shared links and the download buttons. heatmap.js draws the figures.
//
// One module per concern under lib/; this file re-exports them, so that a page imports
// what it uses from one place.

export * from "./lib/requests.js";
export * from "./lib/arrays.js";
export * from "./lib/form.js";
export * from "./lib/tabs.js";
export * from "./lib/links.js";
export * from "./lib/downloads.js";
