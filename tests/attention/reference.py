"""References for the engine tests: PyTorch's nn.MultiheadAttention, and the tutorial's code.

The nn.MultiheadAttention is loaded by attnviz.attention.verify's loader. A wrong loader
could not produce agreement to 1e-6 by accident, so the agreement tests check it too.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from attnviz.attention import EmbeddedAttention, LayerConfig
from attnviz.attention.verify import torch_multihead_attention_from
from torch.nn import functional as F  # noqa: N812

LAYER_FIELDS = frozenset(field.name for field in dataclasses.fields(LayerConfig))


def with_layer(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with its layer fields (d_model, seed, ...) gathered into ``config``."""
    layer = {name: value for name, value in kwargs.items() if name in LAYER_FIELDS}
    rest = {name: value for name, value in kwargs.items() if name not in LAYER_FIELDS}
    return {**rest, "config": LayerConfig(**layer)}


def torch_mha_attention(
    model: EmbeddedAttention,
    query_ids: torch.Tensor,
    key_ids: torch.Tensor,
    key_padding: torch.Tensor | None,
    causal: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-head weights (B, H, L_q, L_k) and output from nn.MultiheadAttention.

    key_padding: (B, L_k) bool, True = real token (converted to PyTorch's True = ignore).
    """
    reference = torch_multihead_attention_from(model.attention)
    query = model.embedding(query_ids)
    key = model.embedding(key_ids)
    len_q = query.shape[1]
    attn_mask = ~torch.tril(torch.ones(len_q, len_q, dtype=torch.bool)) if causal else None
    with torch.no_grad():
        output, weights = reference(
            query,
            key,
            key,
            key_padding_mask=None if key_padding is None else ~key_padding,
            attn_mask=attn_mask,
            need_weights=True,
            average_attn_weights=False,
        )
    return weights, output


def tutorial_multihead_attention(
    model: EmbeddedAttention,
    query_ids: torch.Tensor,
    key_ids: torch.Tensor,
    mask: torch.Tensor | None,
    inf: float = 1e12,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tutorial 000 section 7.7's MultiHeadAttention, line for line, returning the weights too.

    mask: (B, L_q, L_k) or (B, 1, L_k) bool, True = attend.
    """
    att = model.attention
    d_model, num_heads, d_k = att.d_model, att.num_heads, att.d_k
    q_in = model.embedding(query_ids)
    kv_in = model.embedding(key_ids)
    with torch.no_grad():
        batch_size = q_in.shape[0]
        q = att.W_q(q_in).view(batch_size, -1, num_heads, d_k).transpose(1, 2)
        k = att.W_k(kv_in).view(batch_size, -1, num_heads, d_k).transpose(1, 2)
        v = att.W_v(kv_in).view(batch_size, -1, num_heads, d_k).transpose(1, 2)
        attn_scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_k)
        if mask is not None:
            attn_scores = attn_scores.masked_fill_(mask.unsqueeze(1) == False, -1 * inf)  # noqa: E712
        attn_dists = F.softmax(attn_scores, dim=-1)
        attn_values = torch.matmul(attn_dists, v)
        attn_values = attn_values.transpose(1, 2).contiguous().view(batch_size, -1, d_model)
        return attn_dists, att.W_o(attn_values)
