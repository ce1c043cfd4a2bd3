"""The tutorials' lessons as experiments: the 1/sqrt(d_k) scale, why the causal mask, parameters.

Shapes use the legend of :mod:`attnviz.attention`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.nn import functional as F  # noqa: N812  (the PyTorch convention)

from .engine import EmbeddedAttention, LayerConfig, check_widths, resolve_device
from .errors import AttentionInputError
from .masks import causal_mask
from .mha import MultiHeadAttention
from .summary import row_entropy_bits
from .tokens import SequenceInput, encode_batches


@dataclass(frozen=True)
class WeightStats:
    """Softmax weights of random scores, summarised.

    Attributes:
        counts: ``bins`` histogram counts of all weights over [0, 1].
        bin_edges: ``bins + 1`` edges of the histogram.
        mean_entropy_bits: mean row entropy in bits (log2(L) = uniform, 0 = one-hot).
        mean_max_weight: mean over rows of the largest weight.
        one_hot_fraction: fraction of rows whose largest weight exceeds 0.99.
    """

    counts: list[int]
    bin_edges: list[float]
    mean_entropy_bits: float
    mean_max_weight: float
    one_hot_fraction: float


@dataclass(frozen=True)
class ScalingCase:
    """One d_k of the scaling experiment: weights with and without 1/sqrt(d_k)."""

    d_k: int
    scaled: WeightStats
    unscaled: WeightStats


def _weight_stats(weights: torch.Tensor, bins: int) -> WeightStats:
    counts = torch.histc(weights.to(torch.float64), bins=bins, min=0.0, max=1.0)
    largest = weights.amax(dim=-1)
    return WeightStats(
        counts=[int(c) for c in counts.tolist()],
        bin_edges=torch.linspace(0.0, 1.0, bins + 1, dtype=torch.float64).tolist(),
        mean_entropy_bits=float(row_entropy_bits(weights).mean()),
        mean_max_weight=float(largest.mean()),
        one_hot_fraction=float((largest > 0.99).to(torch.float64).mean()),
    )


def scaling_experiment(
    d_k_values: Sequence[int] = (8, 64, 512),
    *,
    length: int = 16,
    num_samples: int = 32,
    bins: int = 20,
    seed: int = 0,
) -> list[ScalingCase]:
    """Tutorial 001 section 7: softmax(Q K^T) with and without the 1/sqrt(d_k) scale.

    For each d_k, Q and K are drawn N(0, 1) with shape (num_samples, length, d_k)
    from a generator seeded with ``seed``. The dot products then have variance d_k,
    so without the scale softmax turns nearly one-hot as d_k grows; with it, the
    scores have unit variance whatever d_k is (Vaswani et al. 2017, section 3.2.1,
    footnote 4).

    Args:
        d_k_values: the head widths to compare.
        length: L, queries and keys per sample.
        num_samples: independent (Q, K) draws per d_k.
        bins: histogram bins over [0, 1].
        seed: seed of the generator.

    Returns:
        One :class:`ScalingCase` per d_k, in order.

    Raises:
        AttentionInputError: a d_k, length, num_samples or bins below 1.
    """
    for field, value in (("length", length), ("num_samples", num_samples), ("bins", bins)):
        if value < 1:
            raise AttentionInputError(field, f"must be >= 1, got {value}")
    if not d_k_values or min(d_k_values) < 1:
        raise AttentionInputError("d_k_values", "give at least one d_k, each >= 1")
    generator = torch.Generator().manual_seed(seed)
    cases = []
    for d_k in d_k_values:
        query = torch.randn(num_samples, length, d_k, generator=generator)
        key = torch.randn(num_samples, length, d_k, generator=generator)
        scores = torch.matmul(query, key.transpose(-2, -1))  # (N, L, L)
        cases.append(
            ScalingCase(
                d_k=d_k,
                scaled=_weight_stats(F.softmax(scores / math.sqrt(d_k), dim=-1), bins),
                unscaled=_weight_stats(F.softmax(scores, dim=-1), bins),
            )
        )
    return cases


@dataclass(frozen=True)
class DecodingResult:
    """Step-by-step decoding against one masked pass and one unmasked pass.

    Attributes:
        labels: the L token labels.
        step_weights: (H, L, L); row t is the last row of the forward pass over the
            prefix of t + 1 tokens (causal mask, as tutorial 002 does at each step).
        masked_weights: (H, L, L), one forward pass with the causal mask.
        unmasked_weights: (H, L, L), one forward pass without a mask.
        masked_max_abs_diff: max |step - masked| over weights and outputs.
        unmasked_max_abs_diff: max |step - unmasked| over weights and outputs.
        unmasked_output_diff: (L,) per position, max |output| difference between
            step-by-step decoding and the unmasked pass: how far each token's
            encoding moves when it can see the future (tutorial 002 section 3.1).
    """

    labels: list[str]
    step_weights: torch.Tensor
    masked_weights: torch.Tensor
    unmasked_weights: torch.Tensor
    masked_max_abs_diff: float
    unmasked_max_abs_diff: float
    unmasked_output_diff: torch.Tensor


def decoding_experiment(
    sequence: SequenceInput,
    config: LayerConfig | None = None,
) -> DecodingResult:
    """Tutorial 002 section 3.4: masked training equals step-by-step decoding.

    Runs the seeded layer of :func:`attnviz.attention.compute_attention` L + 2 times:
    once per prefix (1..L tokens, causal mask), once over the whole sequence with the
    causal mask, once without a mask.

    Args:
        sequence: one sequence, ids or words.
        config: the layer, as in :func:`attnviz.attention.compute_attention`.

    Returns:
        A :class:`DecodingResult`; ``masked_max_abs_diff`` is 0 up to float rounding.

    Raises:
        AttentionInputError: as :func:`attnviz.attention.compute_attention`.
    """
    layer = config or LayerConfig()
    layer.check()
    batch = encode_batches(
        {"sequence": [sequence]}, pad_id=layer.pad_id, vocab_size=layer.vocab_size
    )
    ids = batch["sequence"].ids
    length = ids.shape[1]
    run_on = resolve_device(layer.device)
    model = EmbeddedAttention.cached(
        layer.vocab_size, layer.d_model, layer.num_heads, layer.seed, run_on, torch.float32
    )
    ids = ids.to(run_on)
    step_weights = torch.zeros(layer.num_heads, length, length, device=run_on)
    step_output = torch.zeros(length, layer.d_model, device=run_on)
    with torch.inference_mode():
        for t in range(1, length + 1):
            prefix = ids[:, :t]
            output, weights = model(prefix, prefix, causal_mask(t, device=run_on))
            step_weights[:, t - 1, :t] = weights[0, :, t - 1]
            step_output[t - 1] = output[0, t - 1]
        masked_output, masked = model(ids, ids, causal_mask(length, device=run_on))
        unmasked_output, unmasked = model(ids, ids, None)

    def max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a - b).abs().max())

    return DecodingResult(
        labels=batch["sequence"].labels[0],
        step_weights=step_weights.cpu(),
        masked_weights=masked[0].cpu(),
        unmasked_weights=unmasked[0].cpu(),
        masked_max_abs_diff=max(
            max_abs(step_weights, masked[0]), max_abs(step_output, masked_output[0])
        ),
        unmasked_max_abs_diff=max(
            max_abs(step_weights, unmasked[0]), max_abs(step_output, unmasked_output[0])
        ),
        unmasked_output_diff=(step_output - unmasked_output[0]).abs().amax(dim=-1).cpu(),
    )


@dataclass(frozen=True)
class ParameterRow:
    """One parameter tensor of the attention layer."""

    name: str
    shape: list[int]
    count: int


@dataclass(frozen=True)
class ParameterTable:
    """Parameters of MultiHeadAttention(d_model, num_heads), counted from the module.

    Attributes:
        rows: W_q, W_k, W_v, W_o weights and biases.
        total: their sum, 4 * d_model**2 + 4 * d_model.
        by_num_heads: (num_heads, d_k, total) for every num_heads dividing d_model:
            the total never changes (tutorial 002, point 1).
    """

    d_model: int
    num_heads: int
    rows: list[ParameterRow]
    total: int
    by_num_heads: list[tuple[int, int, int]]


def parameter_table(d_model: int, num_heads: int) -> ParameterTable:
    """Count the attention layer's parameters per matrix (tutorial 001 section 5).

    The counts come from the real module, built on the meta device (no memory).

    Raises:
        AttentionInputError: d_model below 1 or not divisible by num_heads.
    """
    check_widths(d_model, num_heads)

    def count(heads: int) -> tuple[list[ParameterRow], int]:
        layer = MultiHeadAttention(d_model, heads, device="meta")
        rows = [
            ParameterRow(name, list(p.shape), p.numel()) for name, p in layer.named_parameters()
        ]
        return rows, sum(r.count for r in rows)

    rows, total = count(num_heads)
    divisors = [h for h in range(1, d_model + 1) if d_model % h == 0]
    return ParameterTable(
        d_model=d_model,
        num_heads=num_heads,
        rows=rows,
        total=total,
        by_num_heads=[(h, d_model // h, count(h)[1]) for h in divisors],
    )
