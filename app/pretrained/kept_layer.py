"""One attention layer of a kept pass: what its maps are recomputed from.

:class:`KeptLayer` holds a layer's query and key states, each row's log-sum-exp and its
score terms (:mod:`.tiles` computes tiles from it, :mod:`.tile_kernel` on a GPU). Shapes:
B batch, H query heads, H_kv key/value heads, L_q x L_k one layer's map, d_k.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from .mask_rules import MaskRule

__all__ = ["KeptLayer"]


@dataclass(frozen=True)
class KeptLayer:
    """What one attention layer's maps are recomputed from.

    Attributes:
        module: the attention module that made the call (which block it is in).
        name: the attention module's class (``LlamaAttention``), for messages.
        query: (B, H, L_q, d_k) query states after position encoding, the model's dtype.
        key: (B, H_kv, L_k, d_k) key states; query head h reads key/value head
            h // (H // H_kv) (transformers' ``repeat_kv``).
        lse: (B, H, L_q) float32, each row's log-sum-exp over its seen keys (sinks in it);
            +inf for a row that sees no key (its weights are then 0, not NaN).
        scaling: the factor the scores are multiplied by.
        softcap: Gemma 2's logit softcap (scores -> tanh(scores / cap) * cap), or None.
        position_bias: T5's relative position bias (B or 1, H or 1, L_q, L_k), or None.
        rule: which keys each row sees (:class:`.mask_rules.MaskRule`), or None with
            ``dense_mask``.
        dense_mask: the mask as the model built it, (B, 1, L_q or 1, L_k) additive (0 to
            attend) or bool (True to attend), where no rule came with it; else None.
        refusal: why tiles of this layer are not exact (its class named), or None.
    """

    module: nn.Module = field(repr=False, compare=False)
    name: str
    query: torch.Tensor
    key: torch.Tensor
    lse: torch.Tensor
    scaling: float
    softcap: float | None = None
    position_bias: torch.Tensor | None = None
    rule: MaskRule | None = None
    dense_mask: torch.Tensor | None = None
    refusal: str | None = None

    @property
    def num_heads(self) -> int:
        """H."""
        return int(self.query.shape[1])

    @property
    def group_size(self) -> int:
        """Query heads per key/value head (H // H_kv)."""
        return self.num_heads // int(self.key.shape[1])

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """(B, H, L_q, L_k) of the layer's weights."""
        size, heads, length_q = (int(n) for n in self.query.shape[:3])
        return size, heads, length_q, int(self.key.shape[2])

    def coverage(self, rows: range, cols: range) -> bool | None:
        """Whether every row of the chunk sees every key of it (True), none (False), or some.

        From the rule alone; None where only :meth:`visible` can tell.
        """
        if self.rule is not None:
            return self.rule.coverage(rows, cols)
        return True if self.dense_mask is None else None

    def visible(self, rows: range, cols: range) -> torch.Tensor:
        """(B, 1, len(rows), len(cols)) bool: which keys each row sees (True = attend)."""
        device = self.query.device
        if self.rule is not None:
            return self.rule.visible(rows, cols, device)
        size = int(self.query.shape[0])
        shape = (size, 1, len(rows), len(cols))
        mask = self.dense_mask
        if mask is None:
            return torch.ones(shape, dtype=torch.bool, device=device)
        part = mask if mask.shape[-2] == 1 else mask[..., rows.start : rows.stop, :]
        part = part[..., cols.start : cols.stop]
        seen = part if part.dtype == torch.bool else part > torch.finfo(part.dtype).min / 2
        return seen.expand(shape)

    def scores(
        self,
        heads: Sequence[int],
        rows: range,
        cols: range,
        visible: torch.Tensor | None = None,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The scores of ``heads`` (one key/value head's) with every score term, unshifted.

        Args:
            heads: query heads that read the same key/value head.
            rows: query rows; ``cols``: key columns (step-1 ranges).
            visible: (B, 1, r, c) bool, the keys each row sees (:meth:`visible`); None
                when every key of the chunk is seen (no masking pass).
            out: a contiguous (B, len(heads), r, c) float32 tensor to write the scores
                into (no copy), or None for a new one.

        Returns:
            (B, len(heads), len(rows), len(cols)) float32, -inf where a key is not seen.
        """
        group = heads[0] // self.group_size
        index = _index(heads, self.query.device)
        query = (
            self.query[:, index, rows.start : rows.stop].float() * self.scaling
        )  # (B, n, r, d_k)
        key = self.key[:, group, cols.start : cols.stop].float()  # (B, c, d_k)
        size, count, length, depth = query.shape
        # the group's heads stacked as rows of one product per input (a third faster on 2
        # cores than broadcasting the key over the heads): (B, n * r, c) -> (B, n, r, c)
        target = None if out is None else out.view(size, count * length, len(cols))
        scores = torch.bmm(
            query.reshape(size, count * length, depth), key.transpose(1, 2), out=target
        ).view(size, count, length, len(cols))
        bias = self.position_bias  # every term in place: ``out`` holds the scores
        if bias is not None:
            part = bias if bias.shape[1] == 1 else bias[:, index]
            part = part if part.shape[-2] == 1 else part[..., rows.start : rows.stop, :]
            scores.add_(part[..., cols.start : cols.stop].float())
        if self.softcap is not None:
            scores.div_(self.softcap).tanh_().mul_(self.softcap)
        if visible is not None:
            scores.masked_fill_(~visible, float("-inf"))
        return scores

    def row_lse(self, heads: Sequence[int], rows: range) -> torch.Tensor:
        """(B, len(heads), len(rows), 1) float32: the LSE of those heads' rows."""
        return self.lse[:, _index(heads, self.lse.device), rows.start : rows.stop, None]


def _index(heads: Sequence[int], device: torch.device) -> torch.Tensor | slice:
    """``heads`` as an index of the head axis: a slice where they are consecutive (a view)."""
    first = heads[0]
    if list(heads) == list(range(first, first + len(heads))):
        return slice(first, first + len(heads))
    return torch.tensor(list(heads), device=device)
