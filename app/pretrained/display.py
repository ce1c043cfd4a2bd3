"""One input's attention maps as the page shows them: special tokens hidden, one layer, pooled.

The page works on one input at a time. It runs alone (no [PAD]), so every map is
L x L over its real tokens. Three display choices, all optional:

* hide the special tokens ([CLS], [SEP]): their rows and columns are removed and
  every remaining row is divided by its sum, so it sums to 1 again (BertViz does the
  same). The head and layer means are then means of these renormalised maps; rollout
  is computed with every token (as Abnar & Zuidema define it) and then renormalised
  the same way. ``special_share`` says how much of each row the hidden tokens took.
* one layer only (``layer_index``).
* block-max pooling of the layers x heads maps to at most ``display_size`` per side,
  for thumbnails of long inputs (:func:`attnviz.attention.summary.block_pool`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..attention.errors import AttentionInputError
from ..attention.summary import block_pool
from .registry import PretrainedAttentions


@dataclass(frozen=True)
class SequenceView:
    """One input's maps, ready to draw; L' tokens after hiding, P <= L' after pooling.

    Attributes:
        tokens: the L' tokens shown.
        input_ids: their ids.
        token_type_ids: their segments (0 = A, 1 = B).
        special_tokens_mask: True for [CLS] / [SEP] (none when hidden).
        attentions: (N', H, P, P) float32; N' is 1 with a layer_index.
        head_mean: (N', P, P) the mean over heads.
        layer_mean: (L', L') the mean over every layer and head, never pooled.
        rollout: (L', L') attention rollout, never pooled.
        hidden_special_tokens: whether [CLS] / [SEP] were removed.
        special_share: with hidden tokens, the mean share of a shown row that went to
            them (over layers, heads and shown rows), else None.
        factor: tokens per pooled block (1 when not pooled).
    """

    tokens: list[str]
    input_ids: list[int]
    token_type_ids: list[int]
    special_tokens_mask: list[bool]
    attentions: torch.Tensor
    head_mean: torch.Tensor
    layer_mean: torch.Tensor
    rollout: torch.Tensor
    hidden_special_tokens: bool
    special_share: float | None
    factor: int


def renormalised(maps: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """The rows and columns of ``keep`` of (..., L, L) maps, each row divided by its sum.

    A row whose kept entries are all 0 stays 0.
    """
    kept = maps[..., keep, :][..., keep]
    total = kept.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, kept / total.clamp_min(1e-30), kept)


def sequence_view(
    result: PretrainedAttentions,
    *,
    hide_special_tokens: bool = False,
    layer_index: int | None = None,
    display_size: int | None = None,
) -> SequenceView:
    """Apply the display choices of the module docstring to a one-input result.

    Args:
        result: :meth:`attnviz.pretrained.registry.PretrainedModel.attention` of one input
            (B = 1, no padding).
        hide_special_tokens: remove [CLS] / [SEP] and renormalise rows.
        layer_index: keep this layer's attentions and head mean only.
        display_size: pool attentions and head means to at most this many rows and
            columns (block max).

    Raises:
        AttentionInputError: (field ``layer_index``) a layer the model does not have,
            or (``hide_special_tokens``) an input made only of special tokens.
        ValueError: ``result`` holds more than one input.
    """
    if result.attentions.shape[1] != 1:
        raise ValueError("sequence_view takes the result of one input")
    num_layers = result.attentions.shape[0]
    if layer_index is not None and not 0 <= layer_index < num_layers:
        raise AttentionInputError("layer_index", f"{layer_index} is not below {num_layers}")
    batch = result.batch
    attentions = result.attentions[:, 0]  # (N, H, L, L)
    rollout = result.rollout[0]
    special = batch.special_tokens_mask[0]
    tokens, ids, types = (
        batch.tokens[0],
        batch.input_ids[0].tolist(),
        batch.token_type_ids[0].tolist(),
    )
    share = None
    if hide_special_tokens:
        keep = ~special
        if not keep.any():
            raise AttentionInputError("hide_special_tokens", "the input has only special tokens")
        share = float(attentions[..., keep, :][..., special].sum(dim=-1).mean())
        attentions = renormalised(attentions, keep)
        rollout = renormalised(rollout, keep)
        positions = keep.nonzero().flatten().tolist()
        tokens = [tokens[i] for i in positions]
        ids = [ids[i] for i in positions]
        types = [types[i] for i in positions]
        special = special[keep]
    head_mean = attentions.mean(dim=1)  # (N, L', L')
    layer_mean = head_mean.mean(dim=0)
    if layer_index is not None:
        attentions = attentions[layer_index : layer_index + 1]
        head_mean = head_mean[layer_index : layer_index + 1]
    factor = 1
    if display_size is not None:
        length = attentions.shape[-1]
        full = torch.ones(attentions.shape[0], length, length, dtype=torch.bool)
        attentions, _, factor, _ = block_pool(attentions, full, display_size, "max")
        head_mean = block_pool(head_mean[:, None], full, display_size, "max")[0][:, 0]
    return SequenceView(
        tokens=tokens,
        input_ids=ids,
        token_type_ids=types,
        special_tokens_mask=special.tolist(),
        attentions=attentions,
        head_mean=head_mean,
        layer_mean=layer_mean,
        rollout=rollout,
        hidden_special_tokens=hide_special_tokens,
        special_share=share,
        factor=factor,
    )
