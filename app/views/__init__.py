"""Plotly figures of the engine's results (Python and the CLI's export)."""

from .figure import attention_figure

__all__ = ["attention_figure"]
