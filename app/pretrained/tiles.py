"""Exact tiles of attention maps, recomputed from a kept pass: q, k and each row's log-sum-exp.

A forward pass run inside :func:`.recorder.keep_pass` keeps, per attention layer, what
every view of its maps needs and nothing L_q x L_k (:class:`KeptLayer`): the query and key
states after position encoding (the model's dtype; keys per key/value head), each query
row's log-sum-exp in float32 (from the kernel that computed the layer's output where it
gives one: :func:`.computing.attention_with_lse`), the family's score terms and the mask
as the model's own rule (:mod:`.mask_rules`). Any block of any head's weights is then

    attn_weights[rows, cols] = exp(score(q[rows], k[cols]) - lse[rows])

exactly the softmax the model computed (Vaswani et al. 2017, eq. 1; the LSE as
FlashAttention keeps it for its backward pass, Dao et al. 2022, Algorithm 2), for the cost
of those rows' Q·Kᵀ: :func:`tile`. The score terms are the ones transformers' eager
attention functions apply, in their order: scaling, a position bias added (T5), a logit
softcap (Gemma 2: tanh(s / cap) * cap), the mask; learned sinks (gpt-oss) are one more
logit in each row's sum, so they are inside the LSE and the row's weights sum below 1.

Each layer is checked against the model's own ``eager_attention_forward`` on a few rows
when it is kept (:func:`kept_layer`); a layer whose eager attention computes something else
(score terms AttnViz does not know) is kept with a refusal that names its class, and
:func:`tile` raises it.

Shapes: B batch, H query heads, H_kv key/value heads, L_q x L_k one layer's map, d_k.
Tiles are pooled by blocks of ``factor`` rows x columns, reduced by their max or mean
(:func:`attnviz.attention.pooling.block_reduce`): the max of a block is
exp(max(s - lse)), one exp per block.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Final, Literal

import torch
from torch import nn

from ..attention.cancellation import check_cancelled
from ..attention.pooling import block_reduce
from . import tile_kernel
from .calls import POSITION_BIAS, AttentionCall, eager_attention, query_row
from .kept_layer import KeptLayer
from .mask_rules import mask_rows, rule_of

TileReduce = Literal["max", "mean"]

TILE_FLOATS: Final = 2**20
"""About how many scores (4 MB of float32, within a core's cache) one chunk of a tile
computes at once: square chunks of about 600 x 600 tokens for SmolLM2's 3 query heads per
key/value head, so that a causal map skips the chunks above its diagonal and the pooling
reads scores still in the cache (at 4,096 tokens on 2 cores: 80 ms a layer, 123 ms with
whole rows of 1,024, 128 ms with chunks of 128; benchmarks/tiles.py)."""

CHECK_TOLERANCE: Final = {torch.float32: 1e-4, torch.float64: 1e-4}
"""Largest weight difference from the model's eager attention a kept layer may show on its
checked rows, by the dtype of its states; 16-bit states: :data:`CHECK_TOLERANCE_HALF`."""
CHECK_TOLERANCE_HALF: Final = 1e-2
"""The same for bfloat16 and float16 states (their LSE comes from 16-bit inputs)."""

KNOWN_KWARGS: Final = frozenset(
    {
        "sliding_window",  # in the mask's rule
        "softcap",
        POSITION_BIAS,
        "is_causal",
        "position_ids",
        "output_attentions",
        "use_cache",
        "cache_position",
        "layer_idx",
    }
)
"""Keyword arguments of an attention call whose effect on the weights :func:`tile` knows.

Another one (a score term of some family AttnViz has not met) does not stop a layer from
being kept: its check against the model's eager attention decides."""


class TileError(ValueError):
    """A tile that cannot be computed exactly: the message names the layer's class and why."""


@dataclass
class KeptPass:
    """The kept layers of one forward pass, in the order the model ran them (layer 0 first).

    Attributes:
        layers: one :class:`KeptLayer` per attention call.
        only: which modules' calls to keep (a vision-language model's decoder, not its
            image encoder, whose maps no view draws); None keeps every call.
    """

    layers: list[KeptLayer] = field(default_factory=list)
    only: Callable[[nn.Module], bool] | None = field(default=None, repr=False)

    @property
    def exact(self) -> bool:
        """Whether every layer's tiles are exact (no layer kept with a refusal)."""
        return all(layer.refusal is None for layer in self.layers)

    @property
    def nbytes(self) -> int:
        """Bytes the kept tensors hold, each storage once (a mask or bias shared by layers)."""
        seen: set[int] = set()
        total = 0
        for layer in self.layers:
            for tensor in (
                layer.query,
                layer.key,
                layer.lse,
                layer.position_bias,
                layer.dense_mask,
            ):
                if tensor is None:
                    continue
                storage = tensor.untyped_storage()
                if storage.data_ptr() not in seen:
                    seen.add(storage.data_ptr())
                    total += storage.nbytes()
        return total


def spilled(kept: KeptPass, folder: str | None = None) -> KeptPass:
    """The same pass with its tensors on disk, memory-mapped: what the OS pages in as read.

    Each layer's tensors are written to a file in ``folder`` (default the system's
    temporary folder, ``TMPDIR``), read back with ``torch.load(mmap=True)`` and the file's
    name removed at once: the mapping keeps the data until the last tensor is freed, and
    nothing is left behind; a layer at a time, so that writing holds one layer's copy more.
    Tensors on the CPU only.

    Raises:
        OSError: the file could not be written (a full disk).
    """
    layers = []
    for layer in kept.layers:  # a file a layer: one layer's contiguous copies at a time
        tensors = {
            name: tensor.contiguous()
            for name, tensor in (
                ("query", layer.query), ("key", layer.key), ("lse", layer.lse),
                ("position_bias", layer.position_bias), ("dense_mask", layer.dense_mask),
            )
            if tensor is not None
        }  # fmt: skip
        handle, path = tempfile.mkstemp(prefix="attnviz-pass-", suffix=".pt", dir=folder)
        try:
            with os.fdopen(handle, "wb") as file:
                torch.save(tensors, file)
            mapped = torch.load(path, mmap=True, weights_only=True)
        finally:
            os.unlink(path)
        del tensors
        layers.append(
            replace(
                layer,
                query=mapped["query"],
                key=mapped["key"],
                lse=mapped["lse"],
                position_bias=mapped.get("position_bias"),
                dense_mask=mapped.get("dense_mask"),
            )
        )
    return KeptPass(layers)


def _scaling(call: AttentionCall) -> float:
    """The call's scaling, or the eager functions' default d_k**-0.5."""
    return float(call.scaling) if call.scaling is not None else int(call.query.shape[-1]) ** -0.5


def _bare_layer(call: AttentionCall, lse: torch.Tensor) -> KeptLayer:
    """A call's states and score terms as a :class:`KeptLayer` with ``lse`` (not checked)."""
    mask = call.attention_mask
    rule = rule_of(mask)
    softcap = call.kwargs.get("softcap")
    bias = call.kwargs.get(POSITION_BIAS)
    return KeptLayer(
        module=call.module,
        name=type(call.module).__name__,
        query=call.query.detach(),
        key=call.key.detach(),
        lse=lse.masked_fill(lse == float("-inf"), float("inf")),  # no key seen: weights 0
        scaling=_scaling(call),
        softcap=None if softcap is None else float(softcap),
        position_bias=bias.detach() if isinstance(bias, torch.Tensor) else None,
        rule=rule,
        dense_mask=None if rule is not None or mask is None else mask.detach(),
    )


def _row_chunk(length_q: int, per_row: int) -> int:
    """Rows per chunk so that one chunk holds about :data:`TILE_FLOATS` scores (at least 1)."""
    return max(1, min(length_q, TILE_FLOATS // max(1, per_row)))


def row_lse(call: AttentionCall) -> torch.Tensor:
    """Each query row's log-sum-exp of one call, recomputed from its scores in chunks of rows.

    The scores with every term :class:`KeptLayer` applies (scaling, position bias, softcap,
    the mask); a module's learned sinks (gpt-oss's ``module.sinks``, one logit per head) are
    one more term of each row's sum.

    Returns:
        (B, H, L_q) float32; -inf for a row that sees no key (and has no sink).
    """
    size, heads, length_q = (int(n) for n in call.query.shape[:3])
    length_k = int(call.key.shape[2])
    zero = torch.zeros((size, heads, length_q), dtype=torch.float32, device=call.query.device)
    layer = _bare_layer(call, zero)
    lse = torch.empty_like(zero)
    step = _row_chunk(length_q, size * layer.group_size * length_k)
    cols = range(length_k)
    for group in range(heads // layer.group_size):
        members = list(range(group * layer.group_size, (group + 1) * layer.group_size))
        for start in range(0, length_q, step):
            check_cancelled()
            rows = range(start, min(length_q, start + step))
            scores = layer.scores(members, rows, cols, layer.visible(rows, cols))
            lse[:, members[0] : members[-1] + 1, start : rows.stop] = scores.logsumexp(dim=-1)
    sinks = getattr(call.module, "sinks", None)
    if isinstance(sinks, torch.Tensor):
        lse = torch.logaddexp(lse, sinks.detach().float().to(lse.device)[None, :, None])
    return lse


def kept_layer(call: AttentionCall, lse: torch.Tensor) -> KeptLayer:
    """One call kept for tiles, checked against the model's own eager attention.

    The weights :func:`tile` gives for a few rows (the first, middle and last) are compared
    with the module's ``eager_attention_forward`` on those rows, in float32; rows that see
    no key are left out (eager attention spreads them evenly, tiles give 0). A difference
    over :data:`CHECK_TOLERANCE` keeps the layer with a refusal naming its class.

    Args:
        call: the call as the layer computed it.
        lse: (B, H, L_q) float32, each row's log-sum-exp (:func:`.computing.attention_with_lse`).
    """
    layer = _bare_layer(call, lse.float())
    unknown = sorted(set(call.kwargs) - KNOWN_KWARGS)
    try:
        eager = eager_attention(call.module)
    except TypeError as error:
        return replace(layer, refusal=f"{layer.name}: {error}")
    _, heads, length_q, length_k = layer.shape
    rows = sorted({0, length_q // 2, length_q - 1})
    kwargs = dict(call.kwargs)
    query = torch.cat([call.query[:, :, r : r + 1] for r in rows], dim=2).float()
    mask = call.attention_mask
    if mask is not None and mask.shape[-2] > 1:
        mask = torch.cat([mask_rows(mask, slice(r, r + 1)) for r in rows], dim=-2)  # type: ignore[misc]
    bias = kwargs.get(POSITION_BIAS)
    if isinstance(bias, torch.Tensor) and bias.shape[-2] > 1:
        kwargs[POSITION_BIAS] = torch.cat([query_row(bias, r) for r in rows], dim=-2)  # type: ignore[misc]
    key = call.key.float()
    with torch.inference_mode():
        _, expected = eager(
            call.module, query, key, key[..., :0], mask, scaling=call.scaling, dropout=0.0,
            **kwargs,
        )  # fmt: skip
    if expected is None:
        return replace(layer, refusal=f"{layer.name}'s eager attention gave no weights")
    got = torch.cat(
        [tile_weights(layer, range(heads), range(r, r + 1), range(length_k)) for r in rows], dim=2
    )
    seen = torch.cat([layer.visible(range(r, r + 1), range(length_k)) for r in rows], dim=2)
    real = seen.any(dim=-1, keepdim=True)  # (B, 1, rows, 1)
    gap = torch.where(real, (got - expected.float()).abs(), 0.0)
    difference = float(gap.amax()) if gap.numel() else 0.0
    tolerance = CHECK_TOLERANCE.get(call.query.dtype, CHECK_TOLERANCE_HALF)
    if not difference <= tolerance:
        terms = f" (its call passes {', '.join(unknown)})" if unknown else ""
        return replace(
            layer,
            refusal=(
                f"{layer.name}: AttnViz's tiles do not reproduce this family's attention "
                f"scores{terms}: {difference:.2g} from its eager attention, over {tolerance:g}"
            ),
        )
    return layer


def tile_weights(layer: KeptLayer, heads: Sequence[int], rows: range, cols: range) -> torch.Tensor:
    """Exact weights of ``heads`` (any, grouped here by key/value head): (B, n, r, c) float32.

    Only the columns some row does not see are masked: for a causal rule, the columns from
    the first row's position on (the chunk's diagonal), not the whole chunk.
    """
    size = int(layer.query.shape[0])
    out = torch.empty((size, len(heads), len(rows), len(cols)), device=layer.query.device)
    seen = layer.coverage(rows, cols)
    rule = layer.rule
    split = 0  # columns before it are seen by every row
    if seen is None and rule is not None and rule.causal:
        split = max(0, min(len(cols), rows.start + rule.q_offset - rule.kv_offset - cols.start + 1))
    masked = range(cols.start + split, cols.stop)
    visible = None if seen is True or not masked else layer.visible(rows, masked)
    for members, places in _groups(layer, heads):
        first = places[0]
        direct = size == 1 and places == list(range(first, first + len(places)))
        part = out[:, first : first + len(places)] if direct else None  # written in place
        scores = layer.scores(members, rows, cols, out=part)
        if visible is not None:
            scores[..., split:].masked_fill_(~visible, float("-inf"))
        scores.sub_(layer.row_lse(members, rows)).exp_()
        if not direct:
            out[:, places] = scores
    return out


def _groups(layer: KeptLayer, heads: Sequence[int]) -> list[tuple[list[int], list[int]]]:
    """``heads`` by key/value head: (the heads, their places in ``heads``) per group."""
    groups: dict[int, tuple[list[int], list[int]]] = {}
    for place, head in enumerate(heads):
        members, places = groups.setdefault(head // layer.group_size, ([], []))
        members.append(head)
        places.append(place)
    return list(groups.values())


def _span(value: range | None, length: int, name: str) -> range:
    """``value`` checked as a step-1 range within 0..length (None: all of it)."""
    if value is None:
        return range(length)
    if value.step != 1 or not 0 <= value.start < value.stop <= length:
        raise IndexError(f"{name} {value.start}..{value.stop - 1} are not in 0..{length - 1}")
    return value


def tile(
    kept: KeptPass,
    layer: int,
    heads: Sequence[int] | None = None,
    rows: range | None = None,
    cols: range | None = None,
    reduce: TileReduce = "max",
    factor: tuple[int, int] = (1, 1),
) -> torch.Tensor:
    """Exact attention weights of one layer's heads over rows x columns, block-pooled.

    weights = exp(score(q[rows], k[cols]) - lse[rows]) with the layer's score terms (the
    module docstring), computed in chunks of about :data:`TILE_FLOATS` scores whose rows
    and columns start on block boundaries, so that pooling a chunk pools the whole tile.
    A chunk no row of which sees any key is not computed. On a CUDA device with Triton
    installed, a layer :func:`.tile_kernel.supports` is computed by its kernel instead
    (the same numbers). Block max is
    exp(max(score - lse)) (one exp per block); block mean averages the block's cells,
    masked ones as 0 (a partial last block: the cells it has), as the dense map pooled by
    :func:`attnviz.attention.pooling.block_reduce` would.

    Args:
        kept: a kept pass (:func:`.recorder.keep_pass`).
        layer: index into ``kept.layers`` (the call's index in the pass).
        heads: query heads, each 0 <= h < H, in the order wanted; None for every head.
        rows: query rows, a step-1 range within 0..L_q; None for all.
        cols: key columns, a step-1 range within 0..L_k; None for all.
        reduce: "max" or "mean" over each block.
        factor: (rows, columns) per block; (1, 1) for the weights themselves.

    Returns:
        (B, len(heads), ceil(R / factor[0]), ceil(C / factor[1])) float32 on the CPU, R x C
        the rows and columns asked for. Rows sum to 1 at factor 1 over every column (below
        1 with sinks); a row that sees no key is 0.

    Raises:
        IndexError: no such layer, head, row or column.
        ValueError: a factor below 1, or a reduction other than max or mean.
        TileError: the layer's attention is not reproduced by tiles (its class named).
    """
    if not 0 <= layer < len(kept.layers):
        raise IndexError(f"layer {layer} is not in 0..{len(kept.layers) - 1}")
    kept_layer_ = kept.layers[layer]
    if kept_layer_.refusal is not None:
        raise TileError(kept_layer_.refusal)
    size, num_heads, length_q, length_k = kept_layer_.shape
    heads = list(range(num_heads)) if heads is None else [int(h) for h in heads]
    if not heads or not all(0 <= h < num_heads for h in heads):
        raise IndexError(f"heads {heads} are not in 0..{num_heads - 1}")
    rows, cols = _span(rows, length_q, "rows"), _span(cols, length_k, "columns")
    factor_q, factor_k = (int(f) for f in factor)
    if factor_q < 1 or factor_k < 1:
        raise ValueError(f"factor {factor}: tokens per block must be at least 1")
    if reduce not in ("max", "mean"):
        raise ValueError(f"reduce {reduce!r}: a tile is reduced by 'max' or 'mean'")
    if kept_layer_.query.is_cuda and tile_kernel.usable() and tile_kernel.supports(kept_layer_):
        # the GPU fast path: one Triton program per cell, q, k and the LSE read in place
        found = tile_kernel.kernel_tile_or_none(
            kept_layer_, heads, rows, cols, reduce, (factor_q, factor_k)
        )
        if found is not None:
            return found.cpu()
    out = torch.zeros(
        (size, len(heads), math.ceil(len(rows) / factor_q), math.ceil(len(cols) / factor_k))
    )
    groups = [(members, torch.tensor(places)) for members, places in _groups(kept_layer_, heads)]
    widest = size * max(len(members) for members, _ in groups)
    side = math.isqrt(max(1, TILE_FLOATS // widest))  # a square chunk, on block boundaries
    col_step = min(max(factor_k, side // factor_k * factor_k), -(-len(cols) // factor_k) * factor_k)
    row_step = max(factor_q, TILE_FLOATS // (widest * col_step) // factor_q * factor_q)
    for r0 in range(0, len(rows), row_step):
        part_rows = range(rows.start + r0, min(rows.stop, rows.start + r0 + row_step))
        for c0 in range(0, len(cols), col_step):
            check_cancelled()
            part_cols = range(cols.start + c0, min(cols.stop, cols.start + c0 + col_step))
            seen = kept_layer_.coverage(part_rows, part_cols)
            masking = None
            if seen is None:
                visible = kept_layer_.visible(part_rows, part_cols)  # (B, 1, r, c), all heads'
                seen = None if bool(visible.any()) else False
                masking = None if bool(visible.all()) else visible
            if seen is False:
                continue  # every weight of the chunk is 0 (the causal future)
            block_rows = slice(r0 // factor_q, r0 // factor_q + -(-len(part_rows) // factor_q))
            block_cols = slice(c0 // factor_k, c0 // factor_k + -(-len(part_cols) // factor_k))
            for members, places in groups:
                scores = kept_layer_.scores(members, part_rows, part_cols, masking)
                lse = kept_layer_.row_lse(members, part_rows)
                if reduce == "max":  # max(s - lse) = max over rows of (max over columns of s) - lse
                    row_max = block_reduce(scores, 1, factor_k, "max").sub_(lse)
                    pooled = block_reduce(row_max, factor_q, 1, "max").exp_()
                else:
                    pooled = block_reduce(scores.sub_(lse).exp_(), factor_q, factor_k, "mean")
                out[:, places, block_rows, block_cols] = pooled.cpu()
    return out


def last_key(layer: KeptLayer, rows: range) -> int:
    """The last key any of ``rows`` sees (0 where none does): a causal chunk's last row."""
    length_k = layer.shape[3]
    rule = layer.rule
    if rule is not None and rule.causal:
        return min(length_k - 1, rows.stop - 1 + rule.q_offset - rule.kv_offset)
    if layer.coverage(rows, range(length_k)) is True:
        return length_k - 1
    seen = layer.visible(rows, range(length_k)).reshape(-1, length_k).any(dim=0).nonzero()
    return int(seen[-1]) if seen.numel() else 0
