"""The interactive views' data, checks and standalone HTML (no Jupyter, no anywidget needed).

The views themselves are the page's JS modules (static/js/widget/attention.js and what it
imports: tokenviews.js's line view, tokens.js's token strip, heatmap.js's grids), bundled
into one ES module by :mod:`attnviz.views.bundle` once per process. Two hosts run it:

* in Jupyter, :class:`attnviz.views.widget.AttentionWidget` (anywidget, the ``notebook``
  extra): the module is the widget's ``_esm``; the selection, the heads shown and the layer
  are traitlets synced with Python;
* everywhere else, :func:`standalone_html`: a page (or a fragment, a notebook's
  ``text/html`` output that nbconvert keeps) holding the module, its CSS and the model's
  state as one JSON document, and ``static/js/widget/standalone.js``, which runs the module
  with a small model of its own in place of the kernel's (ipywidgets' embed manager would
  load its own JS from a CDN; this needs nothing from outside).

Only the model view draws with Plotly.js: the head and token views are SVG and HTML, so
their pages carry no Plotly (tens of kB where the Plotly pages were 1.2 MB and more).

Shapes: N layers, H heads, L_q queries, L_k keys; weights are float32.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterable, Sequence
from functools import cache
from html import escape
from typing import Any, Final, Literal

import numpy as np

from ..resources import STATIC_DIR
from .bundle import bundle

ViewName = Literal["head", "model", "token"]

VIEWS: Final[tuple[ViewName, ...]] = ("head", "model", "token")
"""The views, in the order of their tabs: lines of one layer, every layer x head as
thumbnails, the text shaded by the selection's weights."""

PLOTLY_VIEWS: Final = frozenset({"model"})
"""The views that draw with Plotly.js (the others are SVG and HTML)."""

JS_ROOT: Final = "js"
"""The page's ES modules, under the package's static files."""

WIDGET_ENTRY: Final = "widget/attention.js"
"""The widget's module, under :data:`JS_ROOT`."""

PLOTLY_BUNDLE: Final = "vendor/plotly-attnviz.min.js"
"""AttnViz's Plotly.js bundle (core, heatmap, bar) inside the package's static files."""


@cache
def widget_esm() -> str:
    """The widget's module with every module it imports, as one ES module (cached)."""
    return bundle(STATIC_DIR / JS_ROOT, WIDGET_ENTRY)


PAGE_CSS: Final = "css/attnviz.css"
"""The page's stylesheet, under the package's static files."""


ATLAS_ENTRY: Final = "widget/atlas.js"
"""The atlas widget's module (attnviz.atlas_view), under :data:`JS_ROOT`."""


@cache
def atlas_esm() -> str:
    """The atlas widget's module with every module it imports, as one ES module (cached)."""
    return bundle(STATIC_DIR / JS_ROOT, ATLAS_ENTRY)


@cache
def widget_css() -> str:
    """The widget's CSS: static/js/widget/widget.css, then the page's stylesheet.

    The page's stylesheet is nested in ``.attnviz-widget`` (CSS nesting), so that it styles
    the widget only; widget.css says why and sets the colours the page sets on ``:root``.
    """
    own = (STATIC_DIR / JS_ROOT / "widget" / "widget.css").read_text("utf-8")
    page = (STATIC_DIR / PAGE_CSS).read_text("utf-8")
    return f"{own}\n/* {PAGE_CSS}, scoped to the widget */\n.attnviz-widget {{\n{page}\n}}\n"


@cache
def standalone_js() -> str:
    """The module script that runs the widget without Jupyter (static/js/widget/standalone.js)."""
    return (STATIC_DIR / JS_ROOT / "widget" / "standalone.js").read_text("utf-8")


@cache
def plotly_js() -> str:
    """AttnViz's Plotly.js bundle, safe inside a ``<script>`` element."""
    source = (STATIC_DIR / PLOTLY_BUNDLE).read_text("utf-8")
    return source.replace("</script", "<\\/script")


# The checks of the view state (the widget's traitlets and the standalone pages share them).


def check_view(view: str) -> ViewName:
    """``view`` if it is one of :data:`VIEWS`.

    Raises:
        ValueError: another name.
    """
    for name in VIEWS:
        if view == name:
            return name
    raise ValueError(f"view must be one of {', '.join(VIEWS)}; got {view!r}")


def check_layer(layer: int, num_layers: int) -> int:
    """``layer`` if it is a layer index (0 <= layer < num_layers).

    Raises:
        ValueError: a layer outside the N given.
    """
    if isinstance(layer, bool) or not isinstance(layer, int | np.integer):
        raise ValueError(f"layer must be an int; got {layer!r}")
    if not 0 <= layer < num_layers:
        raise ValueError(f"layer {layer} is outside the {num_layers} layer(s)")
    return int(layer)


def _indices(values: Iterable[Any], count: int, what: str) -> list[int]:
    """Distinct ints in [0, count), ascending.

    Raises:
        ValueError: a value that is not an int, or outside [0, count).
    """
    chosen = set()
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise ValueError(f"{what} must be ints; got {value!r}")
        if not 0 <= value < count:
            raise ValueError(f"{what}: {value} is outside 0 … {count - 1}")
        chosen.add(int(value))
    return sorted(chosen)


def check_heads(heads: Iterable[Any], num_heads: int) -> list[int]:
    """The heads shown: distinct head indices, ascending (empty: none shown).

    Raises:
        ValueError: a value that is not an int in [0, H).
    """
    return _indices(heads, num_heads, "heads")


def check_selected(selected: Iterable[Any], len_q: int) -> list[int]:
    """The selected query positions: distinct, ascending (empty: none selected).

    Raises:
        ValueError: a value that is not an int in [0, L_q).
    """
    return _indices(selected, len_q, "selected")


def selection_weights(
    maps: np.ndarray, layer: int, heads: Sequence[int], selected: Sequence[int]
) -> np.ndarray:
    """The weights the selected queries give every key, in each head shown.

    Args:
        maps: (N, H, L_q, L_k) float32 attention weights.
        layer: the layer (checked by the caller).
        heads: the heads shown, ascending (checked).
        selected: the selected query positions, ascending (checked).

    Returns:
        (len(heads), len(selected), L_k) float32: ``maps[layer, heads][:, selected]``, the
        rows the line view draws.
    """
    return np.asarray(maps[layer][np.ix_(list(heads), list(selected))], dtype=np.float32)


# The standalone page.


def _script_json(value: Any) -> str:
    r"""``value`` as JSON that is safe as the text of a ``<script>`` element.

    ``<``, ``>``, ``&`` and ``'`` are written as \u escapes (as Jinja2's ``tojson`` does),
    so no ``</script>`` or ``<!--`` can appear in it.
    """
    return (
        json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("'", "\\u0027")
    )


def model_state(
    maps: np.ndarray,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    *,
    view: ViewName,
    views: Sequence[ViewName],
    layer: int,
    heads: Sequence[int],
    selected: Sequence[int],
    title: str,
) -> dict[str, Any]:
    """The widget model's state as the standalone page gives it (``_maps`` base64).

    Args:
        maps: (N, H, L_q, L_k) float32.
        query_tokens: L_q strings.  key_tokens: L_k strings.
        view, views, layer, heads, selected, title: as the widget's traitlets.
    """
    return {
        "view": view,
        "views": list(views),
        "title": title,
        "query_tokens": list(query_tokens),
        "key_tokens": list(key_tokens),
        "shape": list(maps.shape),
        "_maps": base64.b64encode(np.ascontiguousarray(maps, dtype="<f4").tobytes()).decode(),
        "layer": layer,
        "heads": list(heads),
        "selected": list(selected),
        "_plotly_js": "",
    }


def standalone_views(view: ViewName) -> list[ViewName]:
    """The tabs of a standalone page of ``view``: the views it can draw offline.

    The model view's page carries Plotly.js and offers every view; the others carry none
    and offer the views that need none.
    """
    with_plotly = view in PLOTLY_VIEWS
    return [v for v in VIEWS if v == view or with_plotly or v not in PLOTLY_VIEWS]


def atlas_html(atlas: dict[str, Any], head: list[int] | None = None) -> str:
    """The head atlas (:func:`attnviz.atlas_view`) as a whole HTML page, offline.

    The page runs the atlas widget's module (:func:`atlas_esm`) with standalone.js's
    small model, Plotly.js inlined: the maps, the sortable table and a click that marks a
    head, as in the notebook, with no kernel.

    Args:
        atlas: POST /api/v1/models/heads's JSON.
        head: the head marked at first, ``[layer, head]`` (None: none).

    Returns:
        The HTML document.
    """
    host = f"attnviz-{uuid.uuid4().hex}"
    data = {
        "host": host,
        "esm": atlas_esm(),
        "css": widget_css(),
        "state": {"atlas": atlas, "head": list(head or []), "_plotly_js": ""},
        "buffers": [],
    }
    title = escape(f"AttnViz head atlas: {atlas.get('model', '')}")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{title}</title></head>\n<body>\n"
        f'<div id="{host}" class="attnviz-widget-host"></div>\n'
        f"<script>{plotly_js()}</script>\n"
        '<script type="application/json" class="attnviz-widget-data">'
        f"{_script_json(data)}</script>\n"
        f'<script type="module">{standalone_js()}</script>\n</body></html>\n'
    )


def standalone_html(
    state: dict[str, Any], *, full_html: bool = True, include_plotlyjs: bool = True
) -> str:
    """The widget as HTML that runs without Jupyter and offline.

    Args:
        state: :func:`model_state`'s.
        full_html: a whole ``<html>`` document (else a ``<div>`` and its scripts, a
            notebook's ``text/html`` output).
        include_plotlyjs: inline AttnViz's Plotly.js bundle when the state's views need it
            (else a model view draws with a ``window.Plotly`` another output put on the
            page, waiting up to 15 s for it).

    Returns:
        The HTML: the host ``<div>``, Plotly.js where needed, the JSON of the module, its
        CSS and the state, and standalone.js as a module script.
    """
    host = f"attnviz-{uuid.uuid4().hex}"
    data = {
        "host": host,
        "esm": widget_esm(),
        "css": widget_css(),
        "state": state,
        "buffers": ["_maps"],
    }
    needs_plotly = include_plotlyjs and any(v in PLOTLY_VIEWS for v in state["views"])
    parts = [
        f'<div id="{host}" class="attnviz-widget-host"></div>',
        f"<script>{plotly_js()}</script>" if needs_plotly else "",
        '<script type="application/json" class="attnviz-widget-data">'
        f"{_script_json(data)}</script>",
        f'<script type="module">{standalone_js()}</script>',
    ]
    body = "\n".join(part for part in parts if part)
    if not full_html:
        return body
    title = escape(state["title"] or "AttnViz")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{title}</title></head>\n<body>\n{body}\n</body></html>\n"
    )
