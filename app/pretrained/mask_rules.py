"""Which keys each query sees, kept as the model's own mask rule rather than a dense mask.

transformers builds every attention mask from an index function (``masking_utils``:
``causal_mask_function``, ``sliding_window_causal_mask_function``, the padding of the 2-D
``attention_mask`` folded in by ``padding_mask_function``, Gemma 3's bidirectional
blocks by ``or_masks``), then expands it to a dense (B, 1, L_q, L_k) tensor through the
mask interface registered for the attention implementation. AttnViz registers
:func:`recorder_mask` for its recorder: it builds the same dense mask as transformers'
``eager_mask`` and attaches to it the :class:`MaskRule` it was made from, so that any
tile of rows and columns (:mod:`.tiles`) is masked by the model's own rule, materialised
for that tile only (rows x columns booleans, never L_q x L_k).

Past :data:`DENSE_MASK_CELLS` cells (2,048 x 2,048), :func:`recorder_mask` makes no dense
mask at all: it hands the layers a *rule-only* mask, a (B, 1, L_q, L_k) view of one NaN
(zero strides, 2 bytes to 8 bytes of storage) carrying its rule, and every consumer takes
the rows it needs through :func:`mask_rows` (materialised from the rule, a chunk of rows
at a time). A consumer that forgot would add NaN to its scores and fail loudly, never
silently attend to hidden keys. A 32,768-token causal mask is then 8 bytes, not the
4 GiB of float32 (and 1 GiB of booleans) ``eager_mask`` builds.

Shapes: B batch, L_q queries, L_k keys. Booleans: True = attend.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import torch

RULE_ATTRIBUTE: Final = "_attnviz_rule"
"""The attribute of a dense mask that holds the :class:`MaskRule` it was built from."""
RULE_ONLY_ATTRIBUTE: Final = "_attnviz_rule_only"
"""The attribute that marks a rule-only mask (:func:`recorder_mask` past the cells)."""

DENSE_MASK_CELLS: Final = 2048 * 2048
"""The most cells (L_q x L_k) of a mask :func:`recorder_mask` builds densely; a larger one
is rule-only (:func:`is_rule_only`), materialised a chunk of rows at a time
(:func:`mask_rows`). 2,048**2 float32 cells are 16 MiB."""


@dataclass(frozen=True)
class MaskRule:
    """A mask as transformers' index function: (batch, head, q_idx, kv_idx) -> attend.

    Attributes:
        batch_size: B.
        q_length: L_q, the query rows of the call.
        kv_length: L_k, the keys of the call.
        q_offset: the position of query row 0 (the cache's length while generating).
        kv_offset: the position of key 0.
        mask_function: transformers' mask function with the padding folded in
            (``and_masks(..., padding_mask_function(...))``), broadcasting index tensors;
            None: every key is seen by every row.
        causal: the rule is exactly causal with no padding (key j seen by query i iff
            j <= i): SDPA's causal flag computes it.
        full: every key is seen by every row (bidirectional, no padding).
    """

    batch_size: int
    q_length: int
    kv_length: int
    q_offset: int
    kv_offset: int
    mask_function: Callable[..., torch.Tensor] | None
    causal: bool = False
    full: bool = False

    def coverage(self, rows: range, cols: range) -> bool | None:
        """Whether every row of ``rows`` sees every key of ``cols`` (True), none (False), or some.

        None where the rule cannot tell without materialising the chunk (:meth:`visible`).
        """
        if self.mask_function is None or self.full:
            return True
        if not self.causal:
            return None
        first_q, last_q = rows.start + self.q_offset, rows.stop - 1 + self.q_offset
        first_k, last_k = cols.start + self.kv_offset, cols.stop - 1 + self.kv_offset
        if last_k <= first_q:
            return True
        return False if first_k > last_q else None

    def visible(self, rows: range, cols: range, device: torch.device | str) -> torch.Tensor:
        """Which of ``cols`` each of ``rows`` sees: (B, 1, len(rows), len(cols)) bool.

        Args:
            rows: query rows, a step-1 range within 0..L_q.
            cols: key columns, a step-1 range within 0..L_k.
            device: where the booleans are made.
        """
        shape = (self.batch_size, 1, len(rows), len(cols))
        if self.mask_function is None:
            return torch.ones(shape, dtype=torch.bool, device=device)
        batch = torch.arange(self.batch_size, device=device)[:, None, None, None]
        head = torch.zeros(1, dtype=torch.long, device=device)[None, :, None, None]
        query = torch.arange(rows.start, rows.stop, device=device) + self.q_offset
        key = torch.arange(cols.start, cols.stop, device=device) + self.kv_offset
        seen = self.mask_function(batch, head, query[None, None, :, None], key[None, None, None, :])
        return torch.as_tensor(seen, device=device).expand(shape)


def rule_of(mask: torch.Tensor | None) -> MaskRule | None:
    """The rule a mask built by :func:`recorder_mask` came from, else None (a dense mask only)."""
    return getattr(mask, RULE_ATTRIBUTE, None)


def is_rule_only(mask: torch.Tensor | None) -> bool:
    """Whether ``mask`` is a rule-only mask (no dense values: read it by :func:`mask_rows`)."""
    return bool(getattr(mask, RULE_ONLY_ATTRIBUTE, False))


def mask_rows(
    mask: torch.Tensor | None, rows: slice | range | None = None, keys: int | None = None
) -> torch.Tensor | None:
    """Rows of a mask as the model's eager attention adds them to its scores.

    A dense mask is sliced (a mask of one row, broadcast over every query, stays as it
    is); a rule-only mask (:func:`is_rule_only`) is materialised from its rule for these
    rows only, as ``eager_mask`` would have built them: 0 to attend, the dtype's lowest
    to mask.

    Args:
        mask: (B, 1, L_q or 1, L_k) additive or boolean, or None.
        rows: query rows, a step-1 slice or range within 0..L_q; None for every row.
        keys: only the first ``keys`` columns; None for all L_k.

    Returns:
        (B, 1, rows or 1, keys) in the mask's dtype, or None for None.
    """
    if mask is None:
        return None
    length_q, length_k = int(mask.shape[-2]), int(mask.shape[-1])
    keys = length_k if keys is None else keys
    if rows is None:
        start, stop = 0, length_q
    elif isinstance(rows, range):
        start, stop = rows.start, rows.stop
    else:
        start, stop = rows.indices(length_q)[:2]
    if not is_rule_only(mask):
        part = mask if length_q == 1 else mask[..., start:stop, :]
        return part if keys == length_k else part[..., :keys]
    rule = rule_of(mask)
    assert rule is not None  # a rule-only mask always has its rule
    seen = rule.visible(range(start, stop), range(keys), mask.device)
    if mask.dtype == torch.bool:
        return seen
    zero = torch.zeros((), dtype=mask.dtype, device=mask.device)
    return torch.where(seen, zero, torch.finfo(mask.dtype).min)


def dense_mask(mask: torch.Tensor | None) -> torch.Tensor | None:
    """The whole mask, dense: :func:`mask_rows` of every row (a dense mask as it is)."""
    return mask if mask is None or not is_rule_only(mask) else mask_rows(mask)


def recorder_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: int = 0,
    kv_offset: int = 0,
    mask_function: Callable[..., Any] | None = None,
    attention_mask: torch.Tensor | None = None,
    dtype: torch.dtype = torch.float32,
    use_vmap: bool = False,
    **kwargs: Any,
) -> torch.Tensor | None:
    """The mask interface of AttnViz's recorder: transformers' ``eager_mask``, its rule attached.

    The dense (B, 1, L_q, L_k) additive mask (0 to attend, the dtype's lowest to mask) is
    what the model's eager attention adds to its scores; the rule (:class:`MaskRule`,
    :func:`rule_of`) is the index function it was expanded from, with the 2-D padding
    mask folded in as ``sdpa_mask`` folds it. A vmapped custom mask keeps no rule.
    Past :data:`DENSE_MASK_CELLS` cells (and not vmapped), the mask is rule-only
    (:func:`is_rule_only`): no dense values, read through :func:`mask_rows`.

    Args:
        As transformers' ``masking_utils.eager_mask`` (the other keyword arguments passed on).

    Returns:
        The dense or rule-only mask, or None where transformers skips a mask that hides
        nothing.
    """
    from transformers.masking_utils import (
        and_masks,
        bidirectional_mask_function,
        causal_mask_function,
        eager_mask,
        padding_mask_function,
        prepare_padding_mask,
    )

    function = causal_mask_function if mask_function is None else mask_function
    rule_only = not use_vmap and q_length * kv_length > DENSE_MASK_CELLS
    padding = prepare_padding_mask(attention_mask, kv_length, kv_offset)
    if rule_only:
        if kwargs.get("allow_is_bidirectional_skip") and _nothing_hidden(
            padding, kv_length, kwargs.get("local_size")
        ):
            return None  # as eager_mask: a bidirectional mask that hides nothing
        device = kwargs.get("device", "cpu")
        mask = torch.full((), float("nan"), dtype=dtype, device=device)
        mask = mask.expand(batch_size, 1, q_length, kv_length)
        setattr(mask, RULE_ONLY_ATTRIBUTE, True)
    else:
        mask = eager_mask(
            batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
            kv_offset=kv_offset, mask_function=function, attention_mask=attention_mask,
            dtype=dtype, use_vmap=use_vmap, **kwargs,
        )  # fmt: skip
    if mask is None or use_vmap:
        return mask
    unpadded = padding is None or bool(padding[:, kv_offset : kv_offset + kv_length].all())
    causal = (
        function is causal_mask_function
        and q_offset == kv_offset
        and q_length == kv_length
        and unpadded
    )
    full = function is bidirectional_mask_function and unpadded
    if padding is not None:
        function = and_masks(function, padding_mask_function(padding.bool()))
    rule = MaskRule(
        batch_size, q_length, kv_length, q_offset, kv_offset, function,  # type: ignore[arg-type]
        causal=causal, full=full,
    )  # fmt: skip
    setattr(mask, RULE_ATTRIBUTE, rule)
    return mask


def _nothing_hidden(padding: torch.Tensor | None, kv_length: int, local_size: int | None) -> bool:
    """Transformers' test for skipping a bidirectional mask (no padding, no local window)."""
    from transformers import masking_utils

    skip = getattr(masking_utils, "_ignore_bidirectional_mask_sdpa", None)
    if skip is not None:
        return bool(skip(padding, kv_length, local_size))
    return local_size is None and (padding is None or bool(padding.all()))
