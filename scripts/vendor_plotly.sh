#!/usr/bin/env bash
# Refresh static/vendor/plotly-cartesian.min.js (Plotly.js's partial "cartesian" bundle:
# heatmap, bar, histogram, scatter, ...) and its licence from npm, at the plotly.js
# version the installed plotly Python package ships, so that the page and the exports
# (which embed the package's full plotly.min.js) draw with the same Plotly.js.
# Usage: scripts/vendor_plotly.sh [PYTHON]   (make vendor-plotly)
set -euo pipefail
cd "$(dirname "$0")/.."
python="${1:-.venv/bin/python}"
version="$("$python" -c 'from attnviz.server.routers.pages import bundled_plotly_version; print(bundled_plotly_version())')"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "plotly.js-cartesian-dist-min@${version}" >/dev/null && tar xzf ./*.tgz)
mkdir -p static/vendor
cp "$work/package/plotly-cartesian.min.js" static/vendor/plotly-cartesian.min.js
cp "$work/package/LICENSE" static/vendor/plotly-cartesian.LICENSE
echo "static/vendor/plotly-cartesian.min.js: plotly.js-cartesian-dist-min ${version}"
