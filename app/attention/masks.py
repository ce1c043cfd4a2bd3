"""Attention masks, in the tutorials' polarity: ``True`` = attend, ``False`` = masked.

Shapes follow the engine's legend (see :mod:`attnviz.attention`): B batch, L_q query
length, L_k key length. Every mask here is a ``torch.bool`` tensor that broadcasts
against attention scores of shape (B, L_q, L_k) once a head axis is inserted.

Source: tutorial 000_ead306c3acdd1f55.txt, section 7.4 ("Mask 구축"):
``padding_mask = (batch != pad_id).unsqueeze(1)``, ``nopeak_mask = torch.tril(...)``,
``mask = padding_mask & nopeak_mask``.

Note the opposite convention in PyTorch's ``nn.MultiheadAttention``: its boolean
``key_padding_mask`` and ``attn_mask`` use ``True`` = ignore.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

import torch

from .errors import AttentionInputError

MaskName = Literal["none", "padding", "causal", "padding_causal"]
"""The masks a request can name: none, padding (from pad_id), causal (no-peak), both."""

MASK_NAMES: Final[tuple[str, ...]] = get_args(MaskName)


def padding_mask(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Key padding mask: which keys are real tokens.

    Args:
        ids: (B, L_k) int64 token ids, right-padded with ``pad_id``.
        pad_id: the padding token id.

    Returns:
        (B, 1, L_k) bool; True = attend (the key is not padding).
    """
    return (ids != pad_id).unsqueeze(1)  # (B, 1, L_k)


def causal_mask(length: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """No-peak (causal) mask: query i attends to keys 0..i only.

    Args:
        length: L, the sequence length (queries and keys alike).
        device: where to build the mask.

    Returns:
        (1, L, L) bool lower-triangular; True = attend.
    """
    return torch.tril(torch.ones(1, length, length, dtype=torch.bool, device=device))


def build_mask(
    name: str,
    query_ids: torch.Tensor,
    key_ids: torch.Tensor,
    pad_id: int,
    *,
    cross: bool = False,
) -> torch.Tensor | None:
    """The mask a request names, broadcastable to (B, L_q, L_k).

    Args:
        name: one of :data:`MASK_NAMES`.
        query_ids: (B, L_q) int64 ids of the queries.
        key_ids: (B, L_k) int64 ids of the keys.
        pad_id: the padding token id.
        cross: True for encoder-decoder attention (queries from the target, keys
            from the source), where only "none" and "padding" apply.

    Returns:
        None for "none"; else bool, True = attend: "padding" (B, 1, L_k),
        "causal" (1, L, L), "padding_causal" (B, L, L).

    Raises:
        AttentionInputError: (field ``mask``) for an unknown name, or a causal
            mask asked of cross attention (no causal mask spans source and target).
    """
    if name not in MASK_NAMES:
        raise AttentionInputError(
            "mask", f"unknown mask {name!r}; choose one of {', '.join(MASK_NAMES)}"
        )
    if cross and name in ("causal", "padding_causal"):
        raise AttentionInputError(
            "mask",
            f"{name!r} applies to self-attention only; cross attention takes "
            "'padding' (the source padding mask) or 'none'",
        )
    if name == "none":
        return None
    if name == "padding":
        return padding_mask(key_ids, pad_id)  # (B, 1, L_k)
    nopeak = causal_mask(query_ids.shape[1], device=query_ids.device)  # (1, L, L)
    if name == "causal":
        return nopeak
    return padding_mask(key_ids, pad_id) & nopeak  # (B, 1, L) & (1, L, L) -> (B, L, L)
