"""Per-head summaries and dropout on attention weights.

Shapes use the legend of :mod:`attnviz.attention`: weights are (B, H, L_q, L_k).
"""

from __future__ import annotations

import math

import torch

from .pooling import Reduction, block_factor, block_reduce


def row_entropy_bits(weights: torch.Tensor) -> torch.Tensor:
    """Shannon entropy of each row, in bits: -sum_k w log2 w, with 0 log 0 = 0.

    Computed with ``torch.special.entr`` (-w ln w, 0 at 0) in the weights' dtype
    (float32 at least), divided by ln 2.

    Args:
        weights: (..., L_k) float, rows of non-negative weights.

    Returns:
        (...) float64, 0 for a one-hot row, log2(L_k) for a uniform one.
    """
    w = weights if weights.dtype in (torch.float32, torch.float64) else weights.float()
    nats: torch.Tensor = torch.special.entr(w).sum(dim=-1)
    return (nats / math.log(2)).to(torch.float64)


def head_summary(
    weights: torch.Tensor, fully_masked: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Spot sharp and diffuse heads: mean row entropy, max weight, head average.

    Args:
        weights: (B, H, L_q, L_k) attention weights.
        fully_masked: (B, L_q) bool, rows with no key to attend to; they are left
            out of the mean entropy.

    Returns:
        entropy_bits (B, H) float64, the mean entropy of the other rows (0 when
        none is left); max_weight (B, H); mean_row_max (B, H), the mean of the other
        rows' largest weights (what max_weight cannot say under a causal mask, where
        row 0 has one key and weight 1.0); mean_weights (B, L_q, L_k), the average of
        the H heads.
    """
    # Head by head: entr() needs a buffer as large as its input.
    entropy = torch.stack([row_entropy_bits(weights[:, h]) for h in range(weights.shape[1])], 1)
    rows = (~fully_masked)[:, None, :].to(entropy.dtype)  # (B, 1, L_q)
    counted = rows.sum(dim=-1).clamp_min(1.0)  # (B, 1)
    entropy_bits = (entropy * rows).sum(dim=-1) / counted
    max_weight = weights.amax(dim=(-2, -1))
    mean_row_max = (weights.amax(dim=-1).to(entropy.dtype) * rows).sum(dim=-1) / counted
    return entropy_bits, max_weight, mean_row_max, weights.mean(dim=1)


def dropout_weights(weights: torch.Tensor, p: float, seed: int) -> torch.Tensor:
    """Dropout in training mode, as ``torch.nn.functional.dropout`` defines it.

    Each weight is zeroed with probability ``p`` and the kept ones are scaled by
    1 / (1 - p), so each row sums to 1 in expectation (not exactly). The mask is
    drawn from a generator seeded with ``seed`` on the CPU; with the same seed in
    ``torch.manual_seed`` it is bit-identical to ``F.dropout(weights, p, True)``
    on the CPU (tested).

    Args:
        weights: (B, H, L_q, L_k) float, on the CPU.
        p: drop probability, 0 <= p < 1.
        seed: seed of the dropout mask.

    Returns:
        (B, H, L_q, L_k), the weights after dropout.
    """
    if p == 0.0:
        return weights.clone()
    generator = torch.Generator().manual_seed(seed)
    keep = torch.empty_like(weights).bernoulli_(1.0 - p, generator=generator)
    return weights * keep * (1.0 / (1.0 - p))


def block_pool(
    weights: torch.Tensor, mask: torch.Tensor, size: int, method: str
) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """Downsample (B, H, L_q, L_k) weights to at most size x size blocks for display.

    Each block of factor_q x factor_k cells becomes its maximum ("max", so that a
    sharp weight stays visible) or its mean ("mean"); the last block of a side may
    be partial (:func:`attnviz.attention.pooling.block_reduce`). A block attends if any
    of its cells does.

    Args:
        weights: (B, H, L_q, L_k) float.
        mask: (B, L_q, L_k) bool, True = attend.
        size: the largest side to draw.
        method: "max" or "mean".

    Returns:
        pooled weights (B, H, ceil(L_q / factor_q), ceil(L_k / factor_k)), the pooled
        mask (B, same, same), factor_q and factor_k (1 where a side fits).
    """
    len_q, len_k = weights.shape[-2:]
    factor_q, factor_k = block_factor(len_q, size), block_factor(len_k, size)
    if factor_q == factor_k == 1:
        return weights, mask, 1, 1
    reduction: Reduction = "max" if method == "max" else "mean"
    pooled = block_reduce(weights.float(), factor_q, factor_k, reduction)
    pooled_mask = block_reduce(mask.float(), factor_q, factor_k, "max") > 0
    return pooled, pooled_mask, factor_q, factor_k


def block_labels(labels: list[str], factor: int) -> list[str]:
    """Labels of blocks of ``factor`` positions: the first and last token, "a…b"."""
    if factor == 1:
        return labels
    blocks = [labels[i : i + factor] for i in range(0, len(labels), factor)]
    return [block[0] if len(block) == 1 else f"{block[0]}…{block[-1]}" for block in blocks]
