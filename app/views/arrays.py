"""The attention arrays the notebook views take, read into one shape, and their axes' labels."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np

SHAPES: Final = (
    "(H, L_q, L_k), (B, H, L_q, L_k), (N, B, H, L_q, L_k), or a tuple of N per-layer "
    "(B, H, L_q, L_k) tensors as transformers' output_attentions"
)
"""What the views take, for the messages of :func:`attention_array`."""


def attention_array(attention: Any) -> np.ndarray:
    """Any attention input of the views as one (N, B, H, L_q, L_k) float32 array.

    Args:
        attention: a torch tensor or numpy array (or nested lists) of shape (H, L_q, L_k),
            (B, H, L_q, L_k) or (N, B, H, L_q, L_k); or a tuple or list of N per-layer
            tensors of shape (B, H, L_q, L_k) or (H, L_q, L_k).

    Returns:
        (N, B, H, L_q, L_k) float32 (N = B = 1 where the input had no such axis).

    Raises:
        ValueError: another shape (the message names the shapes taken), layers of
            different shapes, or a NaN or infinite weight.
    """
    if isinstance(attention, (tuple, list)) and attention and _is_array(attention[0]):
        layers = [_as_numpy(layer) for layer in attention]
        shapes = {layer.shape for layer in layers}
        if len(shapes) != 1:
            raise ValueError(f"the layers' attention shapes differ: {sorted(shapes)}")
        array = np.stack(layers)
        if array.ndim == 4:  # N x (H, L_q, L_k)
            array = array[:, None]
        if array.ndim != 5:
            raise ValueError(f"attention must be {SHAPES}; got layers of shape {layers[0].shape}")
    else:
        array = _as_numpy(attention)
        if array.ndim == 3:
            array = array[None, None]
        elif array.ndim == 4:
            array = array[None]
        elif array.ndim != 5:
            raise ValueError(f"attention must be {SHAPES}; got shape {tuple(array.shape)}")
    if not np.isfinite(array).all():
        raise ValueError("attention holds a NaN or infinite weight")
    return array.astype(np.float32, copy=False)


AXES: Final = {3: "(H, L_q, L_k)", 4: "(B, H, L_q, L_k)", 5: "(N, B, H, L_q, L_k)"}
"""How an array of each rank is read (a list of layers: each layer as the rank below)."""


def shape_reading(attention: Any) -> str:
    """How :func:`attention_array` reads ``attention``'s shape, in words for a message.

    "(6, 12, 13, 13) read as (B, H, L_q, L_k): 6 inputs, 12 heads, one layer" and, where
    a 4-D array of several inputs may have been layers, how to pass layers instead.

    Args:
        attention: what :func:`attention_array` takes.

    Returns:
        One sentence; "" for a shape it does not take.
    """
    if isinstance(attention, (tuple, list)) and attention and _is_array(attention[0]):
        layer = tuple(attention[0].shape)
        axes = AXES.get(len(layer) + 1, "")
        return f"{len(attention)} layers of shape {layer}, read as {axes}" if axes else ""
    shape = tuple(np.shape(attention)) if not _is_array(attention) else tuple(attention.shape)
    if len(shape) not in AXES:
        return ""
    reading = f"{shape} read as {AXES[len(shape)]}"
    if len(shape) == 4:
        reading += f": {shape[0]} input(s) of one layer, {shape[1]} heads"
        if shape[0] > 1:
            reading += (
                f"; for {shape[0]} layers of one input pass shape "
                f"({shape[0]}, 1, {shape[1]}, {shape[2]}, {shape[3]}) or a list of layers"
            )
    elif len(shape) == 5:
        reading += f": {shape[0]} layers, {shape[1]} input(s), {shape[2]} heads"
    else:
        reading += f": one layer of one input, {shape[0]} heads"
    return reading


def _is_array(value: Any) -> bool:
    """A tensor or array (nested lists of numbers are one array, not layers)."""
    return hasattr(value, "shape")


def _as_numpy(value: Any) -> np.ndarray:
    """A torch tensor (any dtype or device, autograd or not), an array or nested lists."""
    if hasattr(value, "detach"):  # torch.Tensor, without importing torch here
        value = value.detach().float().cpu().numpy()
    try:
        return np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError) as error:
        raise ValueError(f"attention must be numbers of shape {SHAPES}: {error}") from None


def labels(tokens: Sequence[Any] | None, length: int, name: str) -> list[str]:
    """Token strings for one axis of ``length`` positions (their numbers when None)."""
    if tokens is None:
        return [str(i) for i in range(length)]
    labels = [str(token) for token in tokens]
    if len(labels) != length:
        raise ValueError(f"{name} has {len(labels)} tokens for an axis of {length} positions")
    return labels


def axes(
    tokens: Sequence[Any] | None, target_tokens: Sequence[Any] | None, len_q: int, len_k: int
) -> tuple[list[str], list[str]]:
    """(query labels, key labels): the keys' tokens, and the targets' for cross attention.

    Raises:
        ValueError: a token count that is not the axis's, or non-square maps without
            ``target_tokens``.
    """
    key = labels(tokens, len_k, "tokens")
    if target_tokens:
        return labels(target_tokens, len_q, "target_tokens"), key
    if len_q != len_k:
        raise ValueError(
            f"the maps are {len_q} x {len_k} (cross attention): give target_tokens for the queries"
        )
    return key, key
