// AttnViz's Plotly.js bundle: Plotly.js's core (scatter, layout, axes, shapes, colour bars,
// hover, image export) with only the traces the pages draw, heatmap and bar. Built by
// scripts/vendor_plotly.sh (make vendor-plotly) with esbuild, following Plotly.js's
// CUSTOM_BUNDLE.md and its "lib/core" + Plotly.register modules.
'use strict';

var Plotly = require('plotly.js/lib/core');

Plotly.register([require('plotly.js/lib/heatmap'), require('plotly.js/lib/bar')]);

module.exports = Plotly;
