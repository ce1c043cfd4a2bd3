"""The AttnViz attention engine: torch only, no web code.

Legend, used in every shape in this package (the tutorials' letters):
    B    batch size (number of sequences)
    H    number of heads (num_heads)
    L    padded sequence length; L_q queries, L_k keys (S_L source, T_L target)
    d_model  model width; d_k = d_model // num_heads, the width of one head

Masks are bool with True = attend, as in the tutorials (PyTorch's nn.MultiheadAttention
uses the opposite: True = ignore).
"""

from .engine import AttentionResult, EmbeddedAttention, LayerConfig, compute_attention
from .errors import AttentionInputError
from .masks import MASK_NAMES, build_mask, causal_mask, padding_mask
from .mha import MultiHeadAttention, count_parameters, scaled_dot_product_attention
from .tokens import PAD_LABEL, TokenBatch, encode_batches

__all__ = [
    "MASK_NAMES",
    "PAD_LABEL",
    "AttentionInputError",
    "AttentionResult",
    "EmbeddedAttention",
    "LayerConfig",
    "MultiHeadAttention",
    "TokenBatch",
    "build_mask",
    "causal_mask",
    "compute_attention",
    "count_parameters",
    "encode_batches",
    "padding_mask",
    "scaled_dot_product_attention",
]
