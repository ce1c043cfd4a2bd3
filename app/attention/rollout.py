"""Attention rollout (Abnar & Zuidema 2020): how attention composes across layers.

Shapes: N layers, B inputs, L tokens.
"""

from __future__ import annotations

from typing import Final

import torch

ROLLOUT_FLOAT64_TOKENS: Final = 512
"""Rollouts up to this many tokens are computed in float64, longer ones in float32."""
MAX_ROLLOUT_TOKENS: Final = 2048
"""Views of longer inputs leave rollout out: N products of L^3 (30 x 137 GFLOP at 4096)."""


def attention_rollout(head_means: torch.Tensor) -> torch.Tensor:
    """Attention rollout across layers (Abnar & Zuidema 2020, "Quantifying Attention Flow").

    Per layer, the head-averaged attention A_l plus the residual connection,
    Â_l = 0.5 A_l + 0.5 I, rows renormalised; then R = Â_N ... Â_2 Â_1. Row i of R
    says how much of token i's final representation flows from each input token.

    Args:
        head_means: (N, B, L, L) float, each layer's mean over heads, rows summing to 1.

    Returns:
        (B, L, L) float32, computed in float64. Every row sums to 1. A real token
        gives padding keys exactly 0: no layer lets it attend to them.
    """
    rollout = None
    for mean in head_means:
        rollout = rollout_step(rollout, mean)
    if rollout is None:
        raise ValueError("attention_rollout needs at least one layer")
    return rollout.to(torch.float32)


def rollout_step(rollout: torch.Tensor | None, head_mean: torch.Tensor) -> torch.Tensor:
    """Fold one more layer into a rollout: Â_l @ R, Â_l = 0.5 A_l + 0.5 I renormalised.

    Computed in float64 up to :data:`ROLLOUT_FLOAT64_TOKENS` tokens; beyond, in float32
    (each step is an L^3 product, 2 GFLOP at L = 1024, 8x that in float64 on a CPU).
    A causal model's maps are lower triangular, and so is every product of them: those
    are multiplied block by block (:func:`lower_triangular_product`), a third of the work.

    Args:
        rollout: (B, L, L) of the layers below, or None before the first.
        head_mean: (B, L, L) this layer's mean over heads.

    Returns:
        (B, L, L) float64 (float32 beyond ROLLOUT_FLOAT64_TOKENS).
    """
    dtype = torch.float64 if head_mean.shape[-1] <= ROLLOUT_FLOAT64_TOKENS else torch.float32
    mean = head_mean.to(dtype)
    eye = torch.eye(mean.shape[-1], dtype=dtype, device=mean.device)
    augmented = 0.5 * mean + 0.5 * eye
    augmented = augmented / augmented.sum(dim=-1, keepdim=True)
    if rollout is None:
        return augmented
    if _lower_triangular(augmented) and _lower_triangular(rollout):
        return lower_triangular_product(augmented, rollout)
    return augmented @ rollout


def _lower_triangular(matrices: torch.Tensor) -> bool:
    return not bool(torch.triu(matrices, diagonal=1).any())


LOWER_PRODUCT_BLOCK: Final = 256
"""Below this size :func:`lower_triangular_product` multiplies whole matrices."""


def lower_triangular_product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` for lower-triangular (..., n, n) matrices, skipping the zero blocks.

    With the halves of each side, [[A11, 0], [A21, A22]] [[B11, 0], [B21, B22]] =
    [[A11 B11, 0], [A21 B11 + A22 B21, A22 B22]]: two dense half-size products and two
    lower-triangular ones, recursively; n^3 * 2/3 multiply-adds instead of 2 n^3. Equal to
    ``a @ b`` up to the order of the float sums.
    """
    n = a.shape[-1]
    if n <= LOWER_PRODUCT_BLOCK:
        return a @ b
    h = n // 2
    out = torch.zeros_like(a)
    out[..., :h, :h] = lower_triangular_product(a[..., :h, :h], b[..., :h, :h])
    out[..., h:, h:] = lower_triangular_product(a[..., h:, h:], b[..., h:, h:])
    out[..., h:, :h] = a[..., h:, :h] @ b[..., :h, :h] + a[..., h:, h:] @ b[..., h:, :h]
    return out
