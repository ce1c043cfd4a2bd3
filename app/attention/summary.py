"""Per-head summaries and dropout on attention weights.

Shapes use the legend of :mod:`app.attention`: weights are (B, H, L_q, L_k).
"""

from __future__ import annotations

import torch


def row_entropy_bits(weights: torch.Tensor) -> torch.Tensor:
    """Shannon entropy of each row, in bits: -sum_k w log2 w, with 0 log 0 = 0.

    Args:
        weights: (..., L_k) float, rows of non-negative weights.

    Returns:
        (...) float64, 0 for a one-hot row, log2(L_k) for a uniform one.
    """
    w = weights.to(torch.float64)
    terms = torch.where(w > 0, w * torch.log2(w.clamp_min(torch.finfo(w.dtype).tiny)), 0.0)
    return -terms.sum(dim=-1)


def head_summary(
    weights: torch.Tensor, fully_masked: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Spot sharp and diffuse heads: mean row entropy, max weight, head average.

    Args:
        weights: (B, H, L_q, L_k) attention weights.
        fully_masked: (B, L_q) bool, rows with no key to attend to; they are left
            out of the mean entropy.

    Returns:
        entropy_bits (B, H) float64, the mean entropy of the other rows (0 when
        none is left); max_weight (B, H); mean_weights (B, L_q, L_k), the average
        of the H heads.
    """
    entropy = row_entropy_bits(weights)  # (B, H, L_q)
    rows = (~fully_masked)[:, None, :].to(entropy.dtype)  # (B, 1, L_q)
    counted = rows.sum(dim=-1).clamp_min(1.0)  # (B, 1)
    entropy_bits = (entropy * rows).sum(dim=-1) / counted
    max_weight = weights.amax(dim=(-2, -1))
    return entropy_bits, max_weight, weights.mean(dim=1)


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
