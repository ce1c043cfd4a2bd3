"""Scaled dot-product and multi-head attention, exactly as the tutorials compute them.

Sources: Vaswani et al. 2017, "Attention Is All You Need", eq. 1 and section 3.2.2;
tutorial 000_ead306c3acdd1f55.txt section 7.7 (``MultiHeadAttention``) and
tutorial 001_a60461bcfc75d473.txt sections 1, 4 and 5.

Mask fill and fully-masked rows: masked scores are replaced by ``mask_fill``
before the softmax. A query whose every key is masked (an all-padding sequence, for
instance) has no distribution to take:

* ``mask_fill = -inf`` (the default): softmax alone would give NaN; AttnViz sets
  such a row's weights to exactly 0, so its attention output is 0 before W_o (W_o's
  bias after it). This is also what ``F.scaled_dot_product_attention`` returns.
* a finite fill such as -1e9, -1e10 or -1e12 (the tutorials' choices): the row's scores
  are all equal, so softmax spreads it uniformly, 1 / L_k on every (masked) key,
  exactly as the tutorials compute it.

Every other row is the same under both: exp(-inf) and exp(-1e9 - max) are both
exactly 0 in float32 and float64, as long as |fill| dwarfs the scores.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812  (the PyTorch convention)

ScaleMode = Literal["divide", "multiply"]


def _record(
    stages: dict[str, torch.Tensor] | None, name: str, tensor: torch.Tensor, *, copy: bool = True
) -> None:
    """Keep ``tensor`` as stage ``name`` when stages are recorded.

    A copy, unless ``copy`` is False because nothing writes to the tensor afterwards.
    """
    if stages is not None:
        stages[name] = tensor.clone() if copy else tensor


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    mask_fill: float = float("-inf"),
    *,
    scale: bool = True,
    scale_mode: ScaleMode = "divide",
    stages: dict[str, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T / sqrt(d_k)) V, with the weights returned (Vaswani et al., eq. 1).

    Args:
        query: (B, H, L_q, d_k) float.
        key: (B, H, L_k, d_k), same dtype.
        value: (B, H, L_k, d_k), same dtype.
        mask: bool, broadcastable to (B, H, L_q, L_k); True = attend. None attends
            everywhere.
        mask_fill: the score given to masked entries: -inf, or a finite negative
            number such as the tutorials' -1e9 (module docstring).
        scale: divide the scores by sqrt(d_k) (True, the paper); False shows why
            (tutorial 001 section 7: without it, softmax turns one-hot as d_k grows).
        scale_mode: how the scale is applied: "divide", scores / sqrt(d_k) as the
            tutorials write it, or "multiply", scores * d_k**-0.5 as transformers' BERT
            writes it. The two differ only in rounding of the last bit; each
            reproduces its reference bit for bit.
        stages: if given, filled with the intermediate tensors of the step-through
            (tutorials 000, 003, 004): "scores" Q K^T and "scaled_scores" (both
            (B, H, L_q, L_k)), "masked_scores" (masked entries set to mask_fill).

    Returns:
        attn_output (B, H, L_q, d_k) in the inputs' dtype, and attn_weights
        (B, H, L_q, L_k) in float32 for half-precision inputs, else their dtype. Each row of
        attn_weights sums to 1, except a fully-masked row under -inf, which is all 0.
        Masked entries are exactly 0, except in fully-masked rows under a finite
        fill, which are uniform (module docstring).
    """
    d_k = query.shape[-1]
    # Each step works in place on one (B, H, L_q, L_k) buffer; a recorded stage is a copy.
    scores = torch.matmul(query, key.transpose(-2, -1))  # (B, H, L_q, L_k)
    _record(stages, "scores", scores)
    if scale and scale_mode == "multiply":
        scores.mul_(d_k**-0.5)
    elif scale:
        scores.div_(math.sqrt(d_k))
    if scores.dtype in (torch.float16, torch.bfloat16):
        # Half precision: mask and softmax in float32 (a -1e9 fill overflows float16).
        scores = scores.float()
    _record(stages, "scaled_scores", scores)
    if mask is not None:
        scores.masked_fill_(~mask, mask_fill)
    _record(stages, "masked_scores", scores, copy=False)  # softmax does not write to it
    attn_weights = F.softmax(scores, dim=-1)
    del scores
    if mask is not None and math.isinf(mask_fill):
        # Fully-masked rows are NaN here: make them 0.
        attn_weights.masked_fill_(~mask.any(dim=-1, keepdim=True), 0.0)
    attn_output = torch.matmul(attn_weights.to(value.dtype), value)  # (B, H, L_q, d_k)
    return attn_output, attn_weights


class MultiHeadAttention(nn.Module):
    """Multi-head attention with four d_model x d_model projections W_q, W_k, W_v, W_o.

    MultiHead(Q, K, V) = Concat(head_1, ..., head_H) W_o, with
    head_i = Attention(Q W_q_i, K W_k_i, V W_v_i) (Vaswani et al., section 3.2.2).
    The heads are a view of the projections: (B, L, d_model) -> (B, H, L, d_k), with
    d_k = d_model // num_heads, as in tutorial 000 section 7.5.

    Parameters: 4 * d_model**2 + 4 * d_model, whatever num_heads is
    (tutorial 001 section 5, tutorial 002 point 1).

    Args:
        d_model: model width.
        num_heads: H; must divide d_model.
        scale_mode: see :func:`scaled_dot_product_attention` ("divide", the tutorials'
            form, by default; :mod:`attnviz.pretrained` uses "multiply", BERT's).
        device, dtype: forwarded to the nn.Linear layers.

    Raises:
        ValueError: if num_heads does not divide d_model (callers validate first).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        scale_mode: ScaleMode = "divide",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.scale_mode: ScaleMode = scale_mode
        if num_heads < 1 or d_model % num_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_k = d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model, device=device, dtype=dtype)
        self.W_k = nn.Linear(d_model, d_model, device=device, dtype=dtype)
        self.W_v = nn.Linear(d_model, d_model, device=device, dtype=dtype)
        self.W_o = nn.Linear(d_model, d_model, device=device, dtype=dtype)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, L, d_model) -> (B, H, L, d_k)."""
        batch_size = x.shape[0]
        return x.view(batch_size, -1, self.num_heads, self.d_k).transpose(1, 2)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
        mask_fill: float = float("-inf"),
        *,
        scale: bool = True,
        stages: dict[str, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Attend from ``query`` to ``key``/``value``.

        Args:
            query: (B, L_q, d_model) float.
            key: (B, L_k, d_model).
            value: (B, L_k, d_model).
            mask: bool, True = attend; (B, 1, L_k), (1, L_q, L_k) or (B, L_q, L_k),
                broadcast over heads. None attends everywhere.
            mask_fill: score of masked entries, see :func:`scaled_dot_product_attention`.
            scale: divide scores by sqrt(d_k), see :func:`scaled_dot_product_attention`.
            stages: if given, filled with "q", "k", "v" and "head_output"
                ((B, H, L, d_k) each) and the score stages of
                :func:`scaled_dot_product_attention`.

        Returns:
            attn_output (B, L_q, d_model) after W_o, and attn_weights
            (B, H, L_q, L_k), one matrix per head.
        """
        batch_size = query.shape[0]
        # 1) Linear projections, then split d_model into H heads of d_k.
        q = self.split_heads(self.W_q(query))  # (B, H, L_q, d_k)
        k = self.split_heads(self.W_k(key))  # (B, H, L_k, d_k)
        v = self.split_heads(self.W_v(value))  # (B, H, L_k, d_k)
        # 2) Scaled dot-product attention in every head at once.
        head_mask = None if mask is None else mask.unsqueeze(1)  # (B|1, 1, L_q|1, L_k)
        attn_output, attn_weights = scaled_dot_product_attention(
            q, k, v, head_mask, mask_fill, scale=scale, scale_mode=self.scale_mode, stages=stages
        )
        if stages is not None:
            stages.update(q=q, k=k, v=v, head_output=attn_output)
        # 3) Concatenate the heads and project with W_o.
        attn_output = attn_output.transpose(1, 2).contiguous()  # (B, L_q, H, d_k)
        attn_output = attn_output.view(batch_size, -1, self.d_model)  # (B, L_q, d_model)
        return self.W_o(attn_output), attn_weights


def count_parameters(module: nn.Module) -> int:
    """Number of scalar parameters in ``module`` (tutorial 001 section 5, ``count_parameters``)."""
    return sum(p.numel() for p in module.parameters())
