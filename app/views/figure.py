"""A Plotly figure of the per-head heatmaps, for notebooks and the exported HTML.

Same conventions as the page: one heatmap per head, keys on x, queries on y (first
query at the top), masked cells left empty over a gray background, one shared
colour scale from 0 to the largest weight shown.
"""

from __future__ import annotations

import math
import threading
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

import plotly.graph_objects as go
from plotly.subplots import make_subplots

if TYPE_CHECKING:
    from ..attention.engine import AttentionResult

MASKED_COLOR = "#c8c8c8"
WEIGHT_COLORSCALE = [
    [0.0, "#f7fbff"],
    [0.125, "#deebf7"],
    [0.25, "#c6dbef"],
    [0.375, "#9ecae1"],
    [0.5, "#6baed6"],
    [0.625, "#4292c6"],
    [0.75, "#2171b5"],
    [0.875, "#08519c"],
    [1.0, "#08306b"],
]
"""ColorBrewer Blues, white at 0 (as static/js/heatmap.js)."""


def attention_figure(
    result: AttentionResult, sequence_index: int = 0, columns: int = 4
) -> go.Figure:
    """Per-head heatmaps of one sequence of an attention result.

    Args:
        result: from :func:`attnviz.attention.compute_attention`.
        sequence_index: which sequence of the batch (0-based).
        columns: heads per row of the grid.

    Returns:
        A ``plotly.graph_objects.Figure``; ``fig.show()`` draws it in Jupyter.

    Raises:
        IndexError: if sequence_index is outside the batch.
    """
    batch, heads, len_q, len_k = result.attn_weights.shape
    if not 0 <= sequence_index < batch:
        raise IndexError(f"sequence_index {sequence_index} is outside the batch of {batch}")
    b = sequence_index
    query = [escape(label) for label in result.query_labels[b]]
    key = [escape(label) for label in result.key_labels[b]]
    weights = result.attn_weights[b].float()
    mask = result.mask[b]
    zmax = float(weights.max()) or 1.0
    cols = min(columns, heads)
    rows = math.ceil(heads / cols)
    figure = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=[f"Head {h}" for h in range(heads)],
        horizontal_spacing=0.06,
        vertical_spacing=0.12,
    )
    for h in range(heads):
        shown = weights[h].masked_fill(~mask & (weights[h] == 0), math.nan).tolist()
        figure.add_trace(
            go.Heatmap(
                z=[[None if math.isnan(v) else v for v in row] for row in shown],
                x=list(range(len_k)),
                y=list(range(len_q)),
                zmin=0,
                zmax=zmax,
                colorscale=WEIGHT_COLORSCALE,
                showscale=h == heads - 1,
                hovertemplate="query row %{y}<br>key col %{x}<br>weight %{z:.4f}<extra></extra>",
                texttemplate="%{z:.2f}" if max(len_q, len_k) <= 16 else "",
            ),
            row=h // cols + 1,
            col=h % cols + 1,
        )
        figure.update_xaxes(
            tickvals=list(range(len_k)),
            ticktext=key,
            tickangle=-45,
            row=h // cols + 1,
            col=h % cols + 1,
        )
        figure.update_yaxes(
            tickvals=list(range(len_q)),
            ticktext=query,
            autorange="reversed",
            row=h // cols + 1,
            col=h % cols + 1,
        )
    figure.update_layout(
        height=340 * rows + 60,
        width=max(360 * cols, 480),
        plot_bgcolor=MASKED_COLOR,
        title=f"AttnViz: sequence {b}, {result.dtype} on {result.device}",
        margin={"t": 80},
    )
    return figure


IMAGE_EXPORT_TIMEOUT_S = 180.0
"""A bound on one image export (s): kaleido bounds a figure's rendering (90 s) but not the
start of its Chromium, which once hung for 10 min on a busy machine."""


def write_image(
    figure: go.Figure,
    target: Path,
    *,
    width: int | None = None,
    height: int | None = None,
    scale: float = 1.0,
    timeout_s: float | None = None,
) -> None:
    """Plotly's image export (``figure.write_image``: kaleido and a Chromium), bounded.

    Args:
        figure: the figure.
        target: a .png, .svg or .pdf path.
        width, height: the image's size in px (default the figure's).
        scale: pixels per px.
        timeout_s: the bound (s); None is :data:`IMAGE_EXPORT_TIMEOUT_S`.

    Raises:
        TimeoutError: the export did not end in time (the daemon thread that runs it is
            left to its hung browser; it does not keep the process alive at exit).
        Exception: whatever the export raised (kaleido missing, no browser).
    """
    bound = IMAGE_EXPORT_TIMEOUT_S if timeout_s is None else timeout_s
    failed: list[BaseException] = []

    def run() -> None:
        try:
            figure.write_image(target, width=width, height=height, scale=scale)
        except BaseException as error:  # handed to the caller
            failed.append(error)

    thread = threading.Thread(target=run, name="attnviz-image-export", daemon=True)
    thread.start()
    thread.join(bound)
    if thread.is_alive():
        raise TimeoutError(
            f"the image export did not end within {bound:g} s (kaleido's browser hung);"
            " saving as .html needs no browser"
        )
    if failed:
        raise failed[0]
