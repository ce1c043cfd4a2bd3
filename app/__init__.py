"""AttnViz: a web-based multi-head attention visualizer.

In a notebook, the engine and a figure of the heads::

    from attnviz import attention_figure, compute_attention
    result = compute_attention([[62, 13, 47], [60, 96]], mask="padding_causal")
    result.attn_weights.shape  # (B, H, L_q, L_k) = (2, 2, 3, 3)
    attention_figure(result, sequence_index=0).show()

Any attention tensor a user has (transformers' ``output_attentions`` included), drawn
offline::

    import attnviz
    attnviz.model_view(outputs.attentions, tokens).save("view.html")
"""

__version__ = "0.1.0"

from .attention import AttentionResult, LayerConfig, compute_attention
from .views.atlas import atlas_view, head_examples, head_scores, read_atlas
from .views.figure import attention_figure
from .views.notebook import (
    AttentionView,
    head_view,
    init_notebook,
    model_view,
    token_view,
)
from .views.show import show

__all__ = [
    "AttentionResult",
    "AttentionView",
    "LayerConfig",
    "__version__",
    "atlas_view",
    "attention_figure",
    "compute_attention",
    "head_examples",
    "head_scores",
    "head_view",
    "init_notebook",
    "model_view",
    "read_atlas",
    "show",
    "token_view",
]
