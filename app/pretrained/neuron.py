"""BertViz's neuron view: one query's attention in one head, step by step.

From Vaswani et al. 2017, eq. 1 (the seeds' tutorial 001): the query and key vectors,
their dot products, the scaling, the mask, and the softmax weights the model's own eager
attention gives, read from a kept :class:`.calls.AttentionRecording` (:func:`neuron`) or from
a pass kept for tiles (:func:`neuron_from_tiles`: q, k and each row's log-sum-exp), so that
the view of a long input runs no second forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .calls import AttentionRecording
from .kept_layer import KeptLayer
from .mask_rules import mask_rows
from .tiles import tile_weights


@dataclass(frozen=True)
class Neuron:
    """One query's attention in one head, step by step (BertViz's neuron view).

    From Vaswani et al. 2017, eq. 1 (the seeds' tutorial 001): weights =
    softmax(q . k * scaling + bias), where the scaling is usually 1 / sqrt(d_k).

    Attributes:
        query: (d_k,) float32, the query vector q (after rotary embeddings, if any).
        keys: (L_k, d_k) float32, every key vector k of the head's key/value head.
        scores: (L_k,) float32, q . k.
        scaling: the factor the model multiplies the scores by.
        scaled_scores: (L_k,) float32, q . k * scaling.
        masked: (L_k,) bool, the keys the model's mask excludes (weight 0).
        weights: (L_k,) float32, the softmax weights by the model's own eager attention
            (which also adds what a model adds beyond the mask: T5's position bias).
        key_value_head: the key/value head the query head reads.
    """

    query: torch.Tensor
    keys: torch.Tensor
    scores: torch.Tensor
    scaling: float
    scaled_scores: torch.Tensor
    masked: torch.Tensor
    weights: torch.Tensor
    key_value_head: int


def neuron(recording: AttentionRecording, layer: int, head: int, query: int) -> Neuron:
    """:class:`Neuron` of query position ``query`` in ``head`` of call ``layer`` (input 0).

    Raises:
        IndexError: no such layer, head or position.
    """
    call = recording.calls[layer]
    if not 0 <= head < call.num_heads:
        raise IndexError(f"head {head} is not in 0..{call.num_heads - 1}")
    if not 0 <= query < call.query.shape[2]:
        raise IndexError(f"query {query} is not in 0..{call.query.shape[2] - 1}")
    kv = call.key_value_head(head)
    q = call.query[0, head, query].float().cpu()
    keys = call.key[0, kv].float().cpu()
    scores = keys @ q
    scaling = call.scaling if call.scaling is not None else q.shape[0] ** -0.5
    mask = mask_rows(call.attention_mask, slice(query, query + 1))
    if mask is None:
        masked = torch.zeros(keys.shape[0], dtype=torch.bool)
    else:
        # The mask as given: additive floats (the dtype's lowest masks) or booleans.
        row = mask.reshape(-1, mask.shape[-1])[0].cpu()
        lowest = torch.finfo(row.dtype).min / 2 if row.is_floating_point() else None
        masked = row <= lowest if lowest is not None else ~row  # -inf or the dtype's lowest
    weights = recording.group_weights(layer, kv, query=query)[0, head % call.group_size, 0]
    return Neuron(
        query=q,
        keys=keys,
        scores=scores,
        scaling=float(scaling),
        scaled_scores=scores * scaling,
        masked=masked,
        weights=weights,
        key_value_head=kv,
    )


def neuron_from_tiles(layer: KeptLayer, head: int, query: int) -> Neuron:
    """:class:`Neuron` of query position ``query`` in ``head`` of a layer kept for tiles.

    Input 0: the same q, k, scores and mask as :func:`neuron` reads from a recording, the
    weights exp(q . k * scaling + bias - LSE) of the row (:func:`.tiles.tile_weights`, exact
    to the recorded weights within float32 rounding, 1e-6).

    Raises:
        IndexError: no such head or position.
    """
    _, heads, length_q, length_k = layer.shape
    if not 0 <= head < heads:
        raise IndexError(f"head {head} is not in 0..{heads - 1}")
    if not 0 <= query < length_q:
        raise IndexError(f"query {query} is not in 0..{length_q - 1}")
    kv = head // layer.group_size
    q = layer.query[0, head, query].float().cpu()
    keys = layer.key[0, kv].float().cpu()
    scores = keys @ q
    row, every = range(query, query + 1), range(0, length_k)
    masked = ~layer.visible(row, every)[0, 0, 0].cpu()
    weights = tile_weights(layer, [head], row, every)[0, 0, 0].cpu()
    return Neuron(
        query=q,
        keys=keys,
        scores=scores,
        scaling=float(layer.scaling),
        scaled_scores=scores * layer.scaling,
        masked=masked,
        weights=weights,
        key_value_head=kv,
    )
