#!/usr/bin/env bash
# Rebuild static/vendor/plotly-attnviz.min.js, the page's Plotly.js: the core with only the
# heatmap and bar traces (scripts/plotly_bundle.js), bundled and minified with esbuild from
# the npm package plotly.js at the version the installed plotly Python package ships, so that
# the page and the exports (which embed the package's full plotly.min.js) draw with the same
# Plotly.js. Third-party licence comments are kept at the end of the file; Plotly.js's MIT
# licence goes to static/vendor/plotly-attnviz.LICENSE.
# Usage: scripts/vendor_plotly.sh [PYTHON]   (make vendor-plotly; needs node and npm)
set -euo pipefail
cd "$(dirname "$0")/.."
python="${1:-.venv/bin/python}"
esbuild_version="0.28.2"
version="$("$python" -c 'from attnviz.server.routers.pages import bundled_plotly_version; print(bundled_plotly_version())')"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp scripts/plotly_bundle.js "$work/entry.js"
(
  cd "$work"
  npm init -y >/dev/null
  npm install --silent --no-audit --no-fund "plotly.js@${version}" "esbuild@${esbuild_version}"
  # The settings of Plotly.js's own esbuild-config.js that apply without WebGL traces.
  npx esbuild entry.js --bundle --minify --format=iife --global-name=Plotly \
    --target=es2016 --define:global=window --define:define.amd=false \
    --legal-comments=eof --log-level=warning \
    --banner:js="/**
* plotly.js (attnviz: core, heatmap, bar - minified) v${version}
* Copyright 2012-2026, Plotly, Inc.
* All rights reserved.
* Licensed under the MIT license
*/" \
    --outfile=plotly-attnviz.min.js
)
mkdir -p static/vendor
rm -f static/vendor/plotly-cartesian.min.js static/vendor/plotly-cartesian.LICENSE
cp "$work/plotly-attnviz.min.js" static/vendor/plotly-attnviz.min.js
cp "$work/node_modules/plotly.js/LICENSE" static/vendor/plotly-attnviz.LICENSE
echo "static/vendor/plotly-attnviz.min.js: plotly.js ${version} (core, heatmap, bar)," \
  "$(wc -c < static/vendor/plotly-attnviz.min.js) bytes"
