"""What one input's view is made of, and the maps of a whole batch.

The pieces :mod:`.display` builds a view from: how a map is pooled for display
(:class:`Pooling`, :func:`pooled`: block max), rows renormalised without hidden tokens
(:func:`renormalised`), one layer's shown maps (:class:`LayerMaps`), the whole view
(:class:`SequenceView`, :class:`ViewSummary`); and every map of a padded batch at full
resolution (:func:`batch_maps`). Shapes: N layers, H heads, L_q x L_k one input's maps,
P_q x P_k pooled, A_q x A_k the averages.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import torch

from ..attention.pooling import Reduction, block_factor, block_reduce
from ..attention.rollout import rollout_step
from .blocks import Block
from .methods import method_spec
from .results import PretrainedAttentions

MAX_AVERAGE_SIZE: Final = 512
"""Layer means and rollouts longer than this per side are block-max pooled to it."""

FULL_SUM_CELLS: Final = 2048 * 2048
"""The most cells (shown rows x key columns) whose layer mean is summed at full size and
then block-max pooled to :data:`MAX_AVERAGE_SIZE`. A larger map's layer mean is summed at
that display size directly, block by block (each layer's block sums, exact), and shown as
block means: no L x L float32 sum (4 GiB at 32,768 tokens)."""


@dataclass(frozen=True)
class Pooling:
    """How a map was pooled for display: tokens per row and per column of a block.

    Attributes:
        factor: query tokens per displayed row.
        key_factor: key tokens per displayed column.
        method: how a block's cells became one: "max" (the largest weight) or "mean"
            (the block's sum over the cells it has: the layer mean of a long input,
            summed at its display size, :data:`FULL_SUM_CELLS`).
    """

    factor: int
    key_factor: int
    method: Reduction = "max"

    @property
    def pooled(self) -> bool:
        """Whether any side was pooled."""
        return self.factor > 1 or self.key_factor > 1


@dataclass(frozen=True)
class SequenceView:
    """One input's maps of one block, ready to draw; L_q' x L_k' tokens after hiding.

    Attributes:
        tokens: the L_q' query tokens shown.
        key_tokens: the L_k' key tokens shown (the same as ``tokens`` but for cross attention).
        input_ids: the query tokens' ids.
        token_type_ids: their segments (0 = A, 1 = B).
        special_tokens_mask: True for the query tokens that are special (none when hidden).
        attentions: (N', H', P_q, P_k) float32; N' is 1 with a layer_index, H' 1 with a
            head_index; P <= L' after pooling.
        head_mean: (N', P_q, P_k) the mean over heads.
        layer_mean: (A_q, A_k) the mean over every layer and head (A <= MAX_AVERAGE_SIZE).
        rollout: (A_q, A_k) attention rollout, or None for cross attention (not square) and
            inputs over MAX_ROLLOUT_TOKENS tokens.
        hidden_special_tokens: whether the special tokens were removed.
        special_share: with hidden tokens, the mean share of a shown row that went to
            them (over layers, heads and shown rows), else None.
        pooling: how ``attentions`` and ``head_mean`` were pooled.
        average_pooling: how ``layer_mean`` and ``rollout`` were pooled.
    """

    tokens: list[str]
    key_tokens: list[str]
    input_ids: list[int]
    token_type_ids: list[int]
    special_tokens_mask: list[bool]
    attentions: torch.Tensor
    head_mean: torch.Tensor
    layer_mean: torch.Tensor
    rollout: torch.Tensor | None
    hidden_special_tokens: bool
    special_share: float | None
    pooling: Pooling
    average_pooling: Pooling


def renormalised(
    maps: torch.Tensor, keep: torch.Tensor, keep_keys: torch.Tensor | None = None
) -> torch.Tensor:
    """Rows ``keep`` and columns ``keep_keys`` of (..., L_q, L_k) maps, rows divided by their sum.

    ``keep_keys`` defaults to ``keep`` (square maps). A row whose kept entries are all
    0 stays 0.
    """
    kept = maps[..., keep, :][..., keep if keep_keys is None else keep_keys]
    total = kept.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, kept / total.clamp_min(1e-30), kept)


def pooled(
    maps: torch.Tensor, size: int | None = None, *, factors: tuple[int, int] | None = None
) -> tuple[torch.Tensor, Pooling]:
    """(..., L_q, L_k) maps block-max pooled to at most ``size`` per side, or by ``factors``.

    The blocks of :func:`attnviz.attention.summary.block_pool` ("max"), without its mask.
    ``factors`` (rows, columns per block) pools a chunk of a larger map whose first row
    starts a block; neither: the maps as they are.
    """
    if factors is None:
        if size is None:
            return maps, Pooling(1, 1)
        len_q, len_k = maps.shape[-2:]
        factors = block_factor(len_q, size), block_factor(len_k, size)
    if factors == (1, 1):
        return maps, Pooling(1, 1)
    return block_pooled(maps, *factors), Pooling(*factors)


def block_pooled(maps: torch.Tensor, factor_q: int, factor_k: int) -> torch.Tensor:
    """(..., R, C) maps block-max pooled by ``factor_q`` rows and ``factor_k`` columns, float32.

    As :func:`pooled` with given factors (a last block may be partial): the rows of a
    chunk that starts at a multiple of ``factor_q`` pool into the chunk's own rows
    (:func:`attnviz.attention.pooling.block_reduce`).
    """
    return block_reduce(maps.float(), factor_q, factor_k, "max")


@dataclass(frozen=True)
class LayerMaps:
    """One layer's maps as shown: what :meth:`LayerWalk.layers` yields.

    Attributes:
        layer: its index.
        attentions: (H', P_q, P_k) float32 (H' = 1 with a head_index).
        head_mean: (P_q, P_k) the mean over its heads.
    """

    layer: int
    attentions: torch.Tensor
    head_mean: torch.Tensor


@dataclass(frozen=True)
class ViewSummary:
    """What a walk gives once its last layer is computed (:meth:`LayerWalk.summary`).

    Attributes:
        view: the whole view (its averages, tokens and every shown layer).
        result: the pass it walked: the one it was given, or the pass an observed walk
            ran during its layers (its time, device and next tokens).
    """

    view: SequenceView
    result: PretrainedAttentions


@dataclass(frozen=True)
class BatchMaps:
    """Every map of one block for a whole (padded) batch, at full resolution.

    Attributes:
        attentions: (N, B, H, L_q, L_k) float32, as transformers' ``output_attentions``;
            padding keys get 0.
        head_mean: (N, B, L_q, L_k) the mean over heads.
        layer_mean: (B, L_q, L_k) the mean over every layer and head.
        rollout: (B, L, L) attention rollout
            (:func:`attnviz.attention.rollout.attention_rollout`), or None for cross
            attention and for a method other than the weights.
    """

    attentions: torch.Tensor
    head_mean: torch.Tensor
    layer_mean: torch.Tensor
    rollout: torch.Tensor | None


def batch_maps(result: PretrainedAttentions, block: Block | None = None) -> BatchMaps:
    """Every layer's and head's weights of ``block`` (default the family's first) for the batch.

    Raises:
        AttentionInputError: (field ``block``) a block the model does not have.
    """
    block = block or result.first_block
    layers = torch.stack(
        [result.layer_weights(block, layer) for layer in range(result.num_layers(block))]
    )
    head_mean = layers.mean(dim=2)
    rollout = None
    if block != "cross" and not method_spec(result.method).per_head:
        folded = None
        for mean in head_mean:
            folded = rollout_step(folded, mean)
        rollout = None if folded is None else folded.float()
    return BatchMaps(layers, head_mean, head_mean.mean(dim=0), rollout)


def block_rows(
    maps: torch.Tensor, u0: int, factors: tuple[int, int], how: Reduction
) -> Iterator[tuple[int, torch.Tensor]]:
    """(..., R, C) rows from row ``u0`` of a larger map, reduced by blocks of ``factors``.

    Yields (first block row, reduced rows) for the rows up to the next block boundary
    (a block the chunk begins inside of, reduced alone: one row) and then the rest, which
    starts a block; nothing is padded or copied.
    """
    factor_q, factor_k = factors
    head = min((-u0) % factor_q, maps.shape[-2])
    if head:
        yield u0 // factor_q, block_reduce(maps[..., :head, :], head, factor_k, how)
    if head < maps.shape[-2]:
        yield -(-u0 // factor_q), block_reduce(maps[..., head:, :], factor_q, factor_k, how)


def block_sizes(length: int, factor: int, blocks: int) -> torch.Tensor:
    """(blocks,) float32: the positions each block of ``factor`` holds (the last maybe fewer)."""
    starts = torch.arange(blocks) * factor
    return (length - starts).clamp(max=factor).float()
