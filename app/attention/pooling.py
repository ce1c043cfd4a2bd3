"""Block pooling of attention maps for display: one implementation for every view.

A (..., L_q, L_k) map is cut into blocks of ``factor_q`` rows by ``factor_k`` columns (the
last block of a side may be partial) and each block becomes one cell. Rows and columns are
reduced separately, each by its own reduction:

* ``"max"``: the block's largest weight, so that a sharp weight stays visible (the page's
  thumbnails of long inputs, the toy engine's ``display_size``);
* ``"mean"``: its average over the cells it has (a partial block is not padded);
* ``"sum"``: its total (Whisper's frame maps sum the keys of a cell, so that each row keeps
  its total weight, and average the queries).

Reduced by ``amax``/``sum`` over a view of whole blocks plus one partial block: five times
faster than ``max_pool2d`` with a 64 x 64 kernel on a 2-core CPU (benchmarks/decoder.py).
"""

from __future__ import annotations

from typing import Literal

import torch

Reduction = Literal["max", "mean", "sum"]


def block_factor(length: int, size: int) -> int:
    """Positions per block so that ``length`` positions fit in at most ``size`` blocks."""
    return -(-length // size)


def block_reduce(
    maps: torch.Tensor,
    factor_q: int,
    factor_k: int,
    rows: Reduction = "max",
    columns: Reduction | None = None,
) -> torch.Tensor:
    """(..., R, C) maps pooled to (..., ceil(R / factor_q), ceil(C / factor_k)).

    Args:
        maps: (..., R, C), any float dtype (kept).
        factor_q: rows per block (1: rows as they are).
        factor_k: columns per block.
        rows: how a block's rows are reduced.
        columns: how a block's columns are reduced (default: as ``rows``).

    Returns:
        The pooled maps; the columns are reduced first, then the rows.
    """
    reduced = _reduce(maps, factor_k, -1, rows if columns is None else columns)
    return _reduce(reduced, factor_q, -2, rows)


def _reduce(maps: torch.Tensor, factor: int, dim: int, how: Reduction) -> torch.Tensor:
    """``maps`` reduced along ``dim`` by blocks of ``factor`` (the last one maybe partial)."""
    if factor == 1:
        return maps
    moved = maps.movedim(dim, -1)
    length = moved.shape[-1]
    whole = length // factor * factor
    parts = []
    if whole:
        blocks = moved[..., :whole].reshape(*moved.shape[:-1], -1, factor)
        parts.append(_reduced(blocks, how))
    if whole < length:
        parts.append(_reduced(moved[..., whole:, None].movedim(-2, -1), how))
    joined = torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]
    return joined.movedim(-1, dim)


def _reduced(blocks: torch.Tensor, how: Reduction) -> torch.Tensor:
    """(..., n, k) blocks of k cells along the last dim, each reduced: (..., n)."""
    if how == "max":
        return blocks.amax(dim=-1)
    if how == "sum":
        return blocks.sum(dim=-1)
    return blocks.mean(dim=-1)
