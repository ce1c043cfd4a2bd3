"""The interactive notebook views as a Jupyter widget (anywidget; the ``notebook`` extra).

:class:`AttentionWidget` runs the page's own views (static/js/widget/attention.js and the
modules it imports, bundled by :mod:`attnviz.views.bundle`) in JupyterLab, classic Jupyter,
VS Code and Colab, offline: the module travels as the widget's ``_esm``, the weights as a
binary buffer. What the reader does in the notebook is in the traitlets, and what Python
sets is drawn::

    view = attnviz.head_view(outputs.attentions, tokens)
    view  # in Jupyter: the widget (view.widget)
    view.widget.selected  # [3] after a click on the fourth query token
    view.widget.selected_weights  # (heads shown, selected, L_k): what its lines draw
    view.widget.heads = [0, 5]  # show heads 0 and 5 only

Plotly.js (1.2 MB) is sent only to a front end that draws the model view and has none:
the module asks with the message ``{"request": "plotly"}`` and the widget answers by
setting ``_plotly_js``.

Shapes: N layers, H heads, L_q queries, L_k keys.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import anywidget
import numpy as np
import traitlets

from .interactive import (
    VIEWS,
    atlas_esm,
    atlas_html,
    check_heads,
    check_layer,
    check_selected,
    check_view,
    plotly_js,
    selection_weights,
    widget_css,
    widget_esm,
)

P = ParamSpec("P")
T = TypeVar("T")


class AttentionWidget(anywidget.AnyWidget):
    """One attention tensor in the page's head, model and token views, synced with Python.

    Traitlets (synced with the front end):
        view: "head" (lines of one layer), "model" (every layer x head) or "token" (the
            text shaded by the selection's weights).
        views: the views offered as tabs.
        layer: the head and token views' layer, 0 <= layer < N.
        heads: the heads shown (distinct, ascending; [] shows none).
        selected: the selected query positions (distinct, ascending; [] none).
        selected_weights: read-only, (len(heads), len(selected), L_k) nested lists:
            ``maps[layer, heads][:, selected]``, the rows the line view draws; set here
            whenever layer, heads or selected change (from Python or the front end).
        title: shown above the view.
        query_tokens, key_tokens, shape: the data (read-only).

    A value that breaks the rules above raises ``traitlets.TraitError``.
    """

    _esm = widget_esm()
    _css = widget_css()

    view = traitlets.Unicode("head").tag(sync=True)
    views = traitlets.List[str](traitlets.Unicode(), default_value=list(VIEWS)).tag(sync=True)
    title = traitlets.Unicode("").tag(sync=True)
    query_tokens = traitlets.List(traitlets.Unicode(), read_only=True).tag(sync=True)
    key_tokens = traitlets.List(traitlets.Unicode(), read_only=True).tag(sync=True)
    shape = traitlets.List(traitlets.Int(), read_only=True).tag(sync=True)
    _maps = traitlets.Bytes(read_only=True).tag(sync=True)
    layer = traitlets.Int(0).tag(sync=True)
    heads = traitlets.List(traitlets.Int()).tag(sync=True)
    selected = traitlets.List(traitlets.Int()).tag(sync=True)
    selected_weights: traitlets.List[Any] = traitlets.List(read_only=True).tag(sync=True)
    _plotly_js = traitlets.Unicode("").tag(sync=True)

    def __init__(
        self,
        maps: np.ndarray,
        query_tokens: Sequence[str],
        key_tokens: Sequence[str],
        *,
        view: str = "head",
        views: Sequence[str] = VIEWS,
        layer: int = 0,
        heads: Sequence[int] | None = None,
        selected: Sequence[int] = (),
        title: str = "",
    ) -> None:
        """The widget of ``maps``.

        Args:
            maps: (N, H, L_q, L_k) attention weights (sent as float32).
            query_tokens: L_q token strings.  key_tokens: L_k token strings.
            view, views, layer, heads (None: every head), selected, title: the traitlets'
                first values.

        Raises:
            ValueError: maps that are not 4-D, or token counts that are not its axes'.
            traitlets.TraitError: a view, layer, head or position outside the data.
        """
        array = np.asarray(maps, dtype=np.float32)
        if array.ndim != 4:
            raise ValueError(f"maps must be (N, H, L_q, L_k); got shape {array.shape}")
        num_layers, num_heads, len_q, len_k = array.shape
        if len(query_tokens) != len_q or len(key_tokens) != len_k:
            raise ValueError(
                f"{len(query_tokens)} query and {len(key_tokens)} key tokens for maps of "
                f"{len_q} x {len_k}"
            )
        super().__init__(title=title)
        self._array = np.ascontiguousarray(array, dtype="<f4")  # (N, H, L_q, L_k)
        with self.hold_sync():
            self.set_trait("shape", [num_layers, num_heads, len_q, len_k])
            self.set_trait("query_tokens", [str(t) for t in query_tokens])
            self.set_trait("key_tokens", [str(t) for t in key_tokens])
            self.set_trait("_maps", self._array.tobytes())
            self.views = list(views)
            self.view = view
            self.layer = layer
            self.heads = list(range(num_heads)) if heads is None else list(heads)
            self.selected = list(selected)
        self._update_weights()
        self.on_msg(self._on_message)

    @property
    def maps(self) -> np.ndarray:
        """(N, H, L_q, L_k) float32, the weights drawn (read-only)."""
        view = self._array.view()
        view.flags.writeable = False
        return view

    @traitlets.validate("view")
    def _valid_view(self, proposal: dict[str, Any]) -> str:
        return _checked(check_view, proposal["value"])

    @traitlets.validate("views")
    def _valid_views(self, proposal: dict[str, Any]) -> list[str]:
        views: list[str] = [_checked(check_view, v) for v in proposal["value"]]
        if not views:
            raise traitlets.TraitError("views must offer at least one view")
        return views

    @traitlets.validate("layer")
    def _valid_layer(self, proposal: dict[str, Any]) -> int:
        return _checked(check_layer, proposal["value"], self.shape[0])

    @traitlets.validate("heads")
    def _valid_heads(self, proposal: dict[str, Any]) -> list[int]:
        return _checked(check_heads, proposal["value"], self.shape[1])

    @traitlets.validate("selected")
    def _valid_selected(self, proposal: dict[str, Any]) -> list[int]:
        return _checked(check_selected, proposal["value"], self.shape[2])

    @traitlets.observe("layer", "heads", "selected")
    def _on_state(self, _: dict[str, Any]) -> None:
        if hasattr(self, "_array"):  # after __init__ has set the data
            self._update_weights()

    def _update_weights(self) -> None:
        weights = selection_weights(self._array, self.layer, self.heads, self.selected)
        self.set_trait("selected_weights", weights.tolist())

    def _on_message(self, _widget: Any, content: Any, _buffers: Sequence[bytes]) -> None:
        """The front end's messages: ``{"request": "plotly"}`` asks for Plotly.js."""
        if isinstance(content, dict) and content.get("request") == "plotly":
            self._plotly_js = plotly_js()


class AtlasWidget(anywidget.AnyWidget):
    """The head atlas (attnviz.atlas_view): the page's maps and table, a click synced.

    Traitlets (synced with the front end):
        atlas: read-only, POST /api/v1/models/heads's JSON (scores (N, H) per score,
            definitions, corpus).
        head: ``[layer, head]``, the head last clicked (``[]`` none); Python may set it.

    A head outside the atlas raises ``traitlets.TraitError``.
    """

    _esm = atlas_esm()
    _css = widget_css()

    atlas = traitlets.Dict(read_only=True).tag(sync=True)
    head = traitlets.List(traitlets.Int()).tag(sync=True)
    _plotly_js = traitlets.Unicode("").tag(sync=True)

    def __init__(self, atlas: dict[str, Any]) -> None:
        """The widget of ``atlas`` (:func:`attnviz.views.atlas.atlas_data`'s dict)."""
        super().__init__()
        self.set_trait("atlas", atlas)
        self.on_msg(self._on_message)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the atlas as a standalone HTML page that works offline.

        The maps, the table and a click marking a head, with no kernel, starting from the
        current ``head``.

        Returns:
            The path written.
        """
        target = Path(path)
        target.write_text(atlas_html(dict(self.atlas), list(self.head)), encoding="utf-8")
        return target

    @traitlets.validate("head")
    def _valid_head(self, proposal: dict[str, Any]) -> list[int]:
        head = list(proposal["value"])
        if not head:
            return []
        layers, heads = self.atlas.get("num_layers", 0), self.atlas.get("num_heads", 0)
        if len(head) != 2 or not (0 <= head[0] < layers and 0 <= head[1] < heads):
            raise traitlets.TraitError(
                f"head must be [layer, head] with layer < {layers} and head < {heads}; got {head}"
            )
        return head

    def _on_message(self, _widget: Any, content: Any, _buffers: Sequence[bytes]) -> None:
        """The front end's messages: ``{"request": "plotly"}`` asks for Plotly.js."""
        if isinstance(content, dict) and content.get("request") == "plotly":
            self._plotly_js = plotly_js()


def _checked(check: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``check(*args)``, its ValueError as the TraitError traitlets expects."""
    try:
        return check(*args, **kwargs)
    except ValueError as error:
        raise traitlets.TraitError(str(error)) from None
