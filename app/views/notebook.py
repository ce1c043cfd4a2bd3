"""Attention views for notebooks: the attention tensors a user has in, interactive views out.

``head_view(attention, tokens)`` draws one layer's heads as BertViz's head view (the
queries on the left, the keys on the right, a line from each selected query to every key,
one colour per head); ``model_view(attentions, tokens)`` every layer x head as thumbnails
(BertViz's model view); ``token_view(attention, tokens)`` the text, each token shaded by
the weight the selected tokens give it. All take what users have: a torch tensor or numpy
array of shape (H, L_q, L_k), (B, H, L_q, L_k) or (N, B, H, L_q, L_k), or the tuple of
per-layer (B, H, L_q, L_k) tensors that transformers returns with
``output_attentions=True``.

The result, an :class:`AttentionView`, is drawn by the page's own JS views
(:mod:`attnviz.views.interactive`), offline, with no server:

* in Jupyter (JupyterLab, classic, VS Code, Colab) with anywidget installed (the
  ``notebook`` extra): as :attr:`AttentionView.widget`, an
  :class:`attnviz.views.widget.AttentionWidget` whose selection, heads shown and layer are
  traitlets synced with Python. Its display bundle also holds the standalone HTML below as
  ``text/html``, which front ends without widgets (nbconvert's HTML) show;
* without anywidget, and in ``.save("view.html")``: a standalone page that runs the same
  module with a small model of its own (``static/js/widget/standalone.js``): interactive,
  nothing fetched. The head and token views carry no Plotly.js (tens of kB); the model
  view's page carries AttnViz's Plotly.js bundle (1.2 MB), and in a notebook's outputs
  only the first one of a Python process does (:func:`init_notebook` embeds it again, e.g.
  after that output was cleared).

``.figure`` is still the Plotly figure of the same maps (static heatmaps), to restyle or
to save as PNG, SVG or PDF; ``.save("view.html", interactive=False)`` writes that figure's
page, as before.
"""

from __future__ import annotations

import importlib.util
import json
import math
import uuid
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .arrays import attention_array, axes, shape_reading
from .figure import MASKED_COLOR, WEIGHT_COLORSCALE, write_image
from .interactive import (
    PLOTLY_BUNDLE,
    PLOTLY_VIEWS,
    VIEWS,
    ViewName,
    check_view,
    model_state,
    plotly_js,
    standalone_html,
    standalone_views,
)

if TYPE_CHECKING:
    from .widget import AttentionWidget

__all__ = [
    "PLOTLY_BUNDLE",
    "AttentionView",
    "attention_array",
    "head_view",
    "init_notebook",
    "model_view",
    "token_view",
]

_embedded = False  # whether a view of this process has embedded Plotly.js


class AttentionView:
    """Attention maps drawn interactively in Jupyter, saved as offline HTML, or as a figure.

    Attributes:
        figure: the ``plotly.graph_objects.Figure`` of the maps (one heatmap per map), to
            restyle or to save as an image.
        maps: (N, H, L_q, L_k) float32, the maps of the figure (N = 1 for a head view).
        layers: (N, H, L_q, L_k) float32, every layer the interactive view can show (a
            head view of a model's attentions keeps them all, to change layers).
        view: the interactive view first shown: "head", "model" or "token".
        details: what :func:`attnviz.show` computed beside the maps (the method, tokens,
            generated tokens, ablation, gradient target, head importance, method map);
            empty for a view of arrays.
    """

    def __init__(
        self,
        figure: go.Figure,
        maps: np.ndarray,
        *,
        layers: np.ndarray | None = None,
        layer: int = 0,
        query_tokens: Sequence[str] | None = None,
        key_tokens: Sequence[str] | None = None,
        view: ViewName | None = None,
        title: str = "",
    ) -> None:
        """A view of ``maps`` (and of ``layers``, when the interactive view shows more).

        Args:
            figure: the Plotly figure of ``maps``.
            maps: (N, H, L_q, L_k) float32.
            layers: (N', H, L_q, L_k) float32 the interactive view draws (default ``maps``).
            layer: the layer of ``layers`` the head and token views show first.
            query_tokens: L_q strings (default the positions).  key_tokens: L_k strings.
            view: the interactive view shown first (default: the head view of one layer,
                the model view of several).
            title: its title.
        """
        self.figure = figure
        self.maps = maps
        self.layers = maps if layers is None else layers
        _, _, len_q, len_k = self.layers.shape
        self.view: ViewName = view or ("head" if len(self.layers) == 1 else "model")
        self.title = title
        self.details: dict[str, Any] = {}
        self._layer = layer
        self._query_tokens = list(query_tokens or [str(i) for i in range(len_q)])
        self._key_tokens = list(key_tokens or [str(j) for j in range(len_k)])
        self._widget: AttentionWidget | None = None

    @property
    def widget(self) -> AttentionWidget:
        """The interactive view as a Jupyter widget, made once (its state persists).

        Raises:
            ImportError: anywidget is not installed (the message says how to install it).
        """
        if self._widget is None:
            try:
                from .widget import AttentionWidget
            except ImportError as error:
                raise ImportError(
                    "the interactive notebook views need anywidget: "
                    f"pip install 'attnviz[notebook]' (make install adds it). Details: {error}"
                ) from None
            self._widget = AttentionWidget(
                self.layers,
                self._query_tokens,
                self._key_tokens,
                view=self.view,
                views=VIEWS,
                layer=self._layer,
                title=self.title,
            )
        return self._widget

    def _state(self) -> dict[str, Any]:
        """The model state of the standalone page: the widget's now, if it was made."""
        num_heads = self.layers.shape[1]
        widget = self._widget
        views = standalone_views(self.view)
        return model_state(
            self.layers,
            self._query_tokens,
            self._key_tokens,
            view=check_view(widget.view if widget and widget.view in views else self.view),
            views=views,
            layer=widget.layer if widget else self._layer,
            heads=widget.heads if widget else list(range(num_heads)),
            selected=widget.selected if widget else [],
            title=self.title,
        )

    def to_html(
        self, *, full_html: bool = True, include_plotlyjs: bool = True, interactive: bool = True
    ) -> str:
        """The view as HTML: a standalone page, or a fragment for a notebook's output.

        Args:
            full_html: a whole ``<html>`` document (else a ``<div>`` and its scripts).
            include_plotlyjs: inline AttnViz's Plotly.js bundle where the page draws with
                it (the model view's, and every static figure's); else it draws with a
                ``window.Plotly`` already on the page.
            interactive: the interactive view (:mod:`attnviz.views.interactive`: the page's
                JS views and the state, run by its own small model); False: the Plotly
                figure, static heatmaps, as before.
        """
        if interactive:
            return standalone_html(
                self._state(), full_html=full_html, include_plotlyjs=include_plotlyjs
            )
        element = f"attnviz-{uuid.uuid4().hex}"
        height = int(self.figure.layout.height or 450)
        spec = self.figure.to_json()
        body = (
            f'<div id="{element}" class="attnviz-view" style="height:{height}px"></div>\n'
            f"<script>{plotly_js() if include_plotlyjs else ''}</script>\n"
            f"<script>{_drawing_script(element, spec)}</script>"
        )
        if not full_html:
            return body
        title = escape(str(self.figure.layout.title.text or "AttnViz"))
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{title}</title></head>\n<body>\n{body}\n</body></html>\n"
        )

    def save(
        self,
        path: str | Path,
        *,
        width: int | None = None,
        height: int | None = None,
        scale: float = 1.0,
        interactive: bool = True,
    ) -> Path:
        """Write the view to ``path``, by its suffix.

        ``.html``: a standalone page that works offline: the interactive view (the head
        and token views' pages carry no Plotly.js; the model view's does), or with
        ``interactive=False`` the Plotly figure; ``.png``, ``.svg``, ``.pdf``: Plotly's
        image export of the figure (kaleido, which drives the Chromium on the machine).
        After the reader has clicked in the notebook's widget, the page starts from the
        widget's selection, heads and layer.

        Args:
            path: where to write.
            width: an image's width in px (default the figure's).
            height: an image's height in px (default the figure's).
            scale: a PNG's pixels per px (2 for print).
            interactive: for ``.html``, the interactive view (else the static figure).

        Returns:
            The path written.

        Raises:
            ValueError: another suffix.
            RuntimeError: an image without kaleido or a browser for it (the message says
                what to install), or an export that did not end within
                :data:`~attnviz.views.figure.IMAGE_EXPORT_TIMEOUT_S` (its browser hung).
        """
        target = Path(path)
        suffix = target.suffix.lower()
        if suffix in (".html", ".htm"):
            target.write_text(self.to_html(interactive=interactive), encoding="utf-8")
            return target
        if suffix not in (".png", ".svg", ".pdf"):
            raise ValueError(f"save writes .html, .png, .svg or .pdf, not {target.name!r}")
        try:
            write_image(self.figure, target, width=width, height=height, scale=scale)
        except TimeoutError as error:
            raise RuntimeError(str(error)) from None
        except Exception as error:  # kaleido missing, or no browser for it
            raise RuntimeError(
                f"writing {suffix} needs kaleido and a Chrome or Chromium for it to drive: "
                "pip install 'attnviz[export]' (make install adds it), and a browser "
                f"(Debian: apt-get install chromium; make browser does it). Details: {error}"
            ) from None
        return target

    def _repr_html_(self) -> str:
        """The standalone fragment (the first of the process that needs Plotly.js embeds it)."""
        global _embedded
        needs_plotly = any(v in PLOTLY_VIEWS for v in standalone_views(self.view))
        first = needs_plotly and not _embedded
        _embedded = _embedded or needs_plotly
        return self.to_html(full_html=False, include_plotlyjs=first)

    def _repr_mimebundle_(self, **_: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """The widget's view (with anywidget), the standalone fragment, the repr."""
        data: dict[str, Any] = {"text/plain": repr(self), "text/html": self._repr_html_()}
        metadata: dict[str, Any] = {}
        widget_bundle = self.widget._repr_mimebundle_() if _has_anywidget() else None
        if widget_bundle is not None:
            widget_data, metadata = widget_bundle
            data.update({k: v for k, v in widget_data.items() if k != "text/plain"})
        return data, metadata

    def __repr__(self) -> str:
        layers, heads, len_q, len_k = self.maps.shape
        return f"<AttentionView: {layers} layer(s) x {heads} head(s), {len_q} x {len_k}>"


def _has_anywidget() -> bool:
    """Whether anywidget (the ``notebook`` extra) is installed."""
    return importlib.util.find_spec("anywidget") is not None


def init_notebook() -> None:
    """Embed Plotly.js again in the next view that needs it (its first output was cleared)."""
    global _embedded
    _embedded = False


def _drawing_script(element: str, spec: str) -> str:
    """JavaScript drawing ``spec`` (Plotly JSON) into ``element`` once Plotly.js is there.

    After 10 s without ``window.Plotly`` it says so in the element.
    """
    safe = spec.replace("</", "<\\/")
    return (
        "(function () {\n"
        f"  var id = {json.dumps(element)}, spec = {safe}, tries = 0;\n"
        "  function draw() {\n"
        "    if (!window.Plotly) return false;\n"
        "    window.Plotly.newPlot(id, spec.data, spec.layout, {responsive: true});\n"
        "    return true;\n"
        "  }\n"
        "  if (draw()) return;\n"
        "  var timer = setInterval(function () {\n"
        "    if (draw()) { clearInterval(timer); return; }\n"
        "    if (++tries > 100) {\n"
        "      clearInterval(timer);\n"
        "      document.getElementById(id).textContent = 'Plotly.js is not on this page: "
        "run attnviz.init_notebook() and show the view again.';\n"
        "    }\n"
        "  }, 100);\n"
        "})();"
    )


def _maps_figure(
    maps: np.ndarray,
    rows: int,
    columns: int,
    titles: list[str],
    query: list[str],
    key: list[str],
    title: str,
    cell_px: int,
) -> go.Figure:
    """One heatmap per map in a grid, queries down (first at the top), keys across."""
    count = len(maps)
    labelled = count <= 16
    # Square cells of cell_px, with room for each one's title (and tick labels) around it.
    gap_x, gap_y = (90, 110) if labelled else (14, 30)
    width = columns * cell_px + (columns - 1) * gap_x + 120
    height = rows * cell_px + (rows - 1) * gap_y + 140
    figure = make_subplots(
        rows=rows,
        cols=columns,
        subplot_titles=titles,
        horizontal_spacing=gap_x / (width - 120),
        vertical_spacing=gap_y / (height - 140),
    )
    zmax = float(maps.max()) or 1.0
    small = max(len(query), len(key)) <= 16 and count <= 16
    for n in range(count):
        row, col = n // columns + 1, n % columns + 1
        figure.add_trace(
            go.Heatmap(
                z=maps[n].tolist(),
                x=list(range(len(key))),
                y=list(range(len(query))),
                zmin=0,
                zmax=zmax,
                colorscale=WEIGHT_COLORSCALE,
                showscale=n == count - 1,
                customdata=[
                    [[query[i], key[j]] for j in range(len(key))] for i in range(len(query))
                ],
                hovertemplate=f"{escape(titles[n])}<br>query %{{customdata[0]}}<br>key "
                "%{customdata[1]}<br>weight %{z:.4f}<extra></extra>",
                texttemplate="%{z:.2f}" if small else "",
            ),
            row=row,
            col=col,
        )
        figure.update_xaxes(
            tickvals=list(range(len(key))) if labelled else [],
            ticktext=[escape(t) for t in key] if labelled else [],
            tickangle=-45,
            row=row,
            col=col,
        )
        figure.update_yaxes(
            tickvals=list(range(len(query))) if labelled else [],
            ticktext=[escape(t) for t in query] if labelled else [],
            autorange="reversed",
            row=row,
            col=col,
        )
    figure.update_layout(
        height=height,
        width=max(width, 480),
        plot_bgcolor=MASKED_COLOR,
        title=escape(title),
        margin={"t": 80, "l": 70 if labelled else 30, "r": 50, "b": 60 if labelled else 20},
    )
    return figure


def _selected(array: np.ndarray, sequence_index: int, reading: str = "") -> np.ndarray:
    """(N, H, L_q, L_k): input ``sequence_index`` of the batch.

    ``reading`` (how the shape was read, :func:`.arrays.shape_reading`) goes in the error.
    """
    batch = array.shape[1]
    if not 0 <= sequence_index < batch:
        raise IndexError(
            f"sequence_index {sequence_index} is outside the batch of {batch}"
            + (f" ({reading})" if reading else "")
        )
    return array[:, sequence_index]


def _axes(
    tokens: Sequence[Any] | None,
    target_tokens: Sequence[Any] | None,
    len_q: int,
    len_k: int,
    reading: str,
) -> tuple[list[str], list[str]]:
    """:func:`.arrays.axes`, its error saying how the array's shape was read."""
    try:
        return axes(tokens, target_tokens, len_q, len_k)
    except ValueError as error:
        raise ValueError(f"{error} ({reading})" if reading else str(error)) from None


def _layer_view(
    view: ViewName,
    attention: Any,
    tokens: Sequence[Any] | None,
    target_tokens: Sequence[Any] | None,
    layer: int,
    sequence_index: int,
    columns: int,
    title: str | None,
) -> AttentionView:
    """head_view's and token_view's view: one layer first, every layer kept."""
    reading = shape_reading(attention)
    layers = _selected(attention_array(attention), sequence_index, reading)  # (N, H, L_q, L_k)
    if not 0 <= layer < len(layers):
        raise IndexError(f"layer {layer} is outside the {len(layers)} layer(s) ({reading})")
    maps = layers[layer]  # (H, L_q, L_k)
    heads, len_q, len_k = maps.shape
    query, key = _axes(tokens, target_tokens, len_q, len_k, reading)
    cols = max(1, min(columns, heads))
    figure = _maps_figure(
        maps,
        math.ceil(heads / cols),
        cols,
        [f"Head {h}" for h in range(heads)],
        query,
        key,
        title or f"AttnViz head view: layer {layer}, input {sequence_index}",
        cell_px=260,
    )
    return AttentionView(
        figure,
        maps[None],
        layers=layers,
        layer=layer,
        query_tokens=query,
        key_tokens=key,
        view=view,
        title=title or f"AttnViz {view} view: input {sequence_index}",
    )


def head_view(
    attention: Any,
    tokens: Sequence[Any] | None = None,
    *,
    target_tokens: Sequence[Any] | None = None,
    layer: int = 0,
    sequence_index: int = 0,
    columns: int = 4,
    title: str | None = None,
) -> AttentionView:
    """One layer's heads as lines from each query token to every key (BertViz's head view).

    Interactive (tokenviews.js's line view): click a query token to draw its lines
    (shift-click adds one), hover a head's colour to see it alone, click it to hide it,
    double-click it to keep only it; a menu changes the layer when ``attention`` has several.

    Args:
        attention: any shape :func:`attention_array` takes.
        tokens: the keys' tokens (and the queries', for self-attention); None numbers them.
        target_tokens: the queries' tokens for cross attention (L_q of them).
        layer: which layer of an (N, ...) input or a per-layer tuple is shown first.
        sequence_index: which input of a batch.
        columns: heads per row of the figure (``.figure``, the static heatmaps).
        title: the title (default: the view and input).

    Returns:
        An :class:`AttentionView`; ``maps`` is (1, H, L_q, L_k) (that layer),
        ``layers`` (N, H, L_q, L_k).

    Raises:
        ValueError: a shape or token count that does not fit (the message says which).
        IndexError: ``layer`` or ``sequence_index`` outside the input.
    """
    return _layer_view(
        "head", attention, tokens, target_tokens, layer, sequence_index, columns, title
    )


def token_view(
    attention: Any,
    tokens: Sequence[Any] | None = None,
    *,
    target_tokens: Sequence[Any] | None = None,
    layer: int = 0,
    sequence_index: int = 0,
    title: str | None = None,
) -> AttentionView:
    """The text, each token shaded by the weight the selected tokens give it.

    Interactive (tokens.js's token strip): click a token to select it (shift-click adds
    one, the arrow keys move it); the shading is the mean over the heads shown, or one
    head; a menu changes the layer.

    Args:
        attention: any shape :func:`attention_array` takes.
        tokens: the keys' tokens (and the queries', for self-attention); None numbers them.
        target_tokens: the queries' tokens for cross attention.
        layer: the layer shown first.
        sequence_index: which input of a batch.
        title: the title.

    Returns:
        An :class:`AttentionView` (``maps`` and ``.figure`` as :func:`head_view`'s).

    Raises:
        ValueError: a shape or token count that does not fit.
        IndexError: ``layer`` or ``sequence_index`` outside the input.
    """
    return _layer_view("token", attention, tokens, target_tokens, layer, sequence_index, 4, title)


def model_view(
    attentions: Any,
    tokens: Sequence[Any] | None = None,
    *,
    target_tokens: Sequence[Any] | None = None,
    sequence_index: int = 0,
    title: str | None = None,
) -> AttentionView:
    """Every layer x head as small heatmaps, layer 0 at the top (BertViz's model view).

    Interactive (heatmap.js's tiled grid, drawn with Plotly.js): click a thumbnail to
    enlarge it, a token to outline its row in every thumbnail.

    Args:
        attentions: any shape :func:`attention_array` takes; transformers'
            ``outputs.attentions`` as it is.
        tokens: the keys' tokens (and the queries', for self-attention); None numbers them.
        target_tokens: the queries' tokens for cross attention.
        sequence_index: which input of a batch.
        title: the figure's title.

    Returns:
        An :class:`AttentionView`; ``maps`` is (N, H, L_q, L_k).

    Raises:
        ValueError: a shape or token count that does not fit.
        IndexError: ``sequence_index`` outside the batch.
    """
    reading = shape_reading(attentions)
    maps = _selected(attention_array(attentions), sequence_index, reading)  # (N, H, L_q, L_k)
    layers, heads, len_q, len_k = maps.shape
    query, key = _axes(tokens, target_tokens, len_q, len_k, reading)
    title = title or f"AttnViz model view: {layers} layers x {heads} heads, input {sequence_index}"
    figure = _maps_figure(
        maps.reshape(layers * heads, len_q, len_k),
        layers,
        heads,
        [f"L{n // heads} H{n % heads}" for n in range(layers * heads)],
        query,
        key,
        title,
        cell_px=max(60, min(200, 1100 // heads)),
    )
    return AttentionView(
        figure, maps, query_tokens=query, key_tokens=key, view="model", title=title
    )
