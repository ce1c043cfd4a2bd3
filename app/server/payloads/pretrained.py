"""The bodies of the pretrained-model responses, built from what the runtime computed.

One function per part of a response: :func:`model_info` (GET /api/v1/models),
:func:`batch_payload` (the whole batch), :func:`sequence_payload` (one input, with
:func:`sequence_fields` as the streamed grid's start line) and the objects inside them.
Arrays go through :func:`attnviz.server.transport.encode_floats` /
:func:`~attnviz.server.transport.encode_large` in the request's ``encoding``.
Shapes: N layers, B inputs, H heads, L_q x L_k maps, P_q x P_k pooled.
"""

from __future__ import annotations

from typing import Any

import orjson
import torch

from ...pretrained import ModelEntry, PretrainedModel, TokenizedBatch
from ...pretrained.analysis import PreparedSequence
from ...pretrained.blocks import Block
from ...pretrained.gradients import GradientPass
from ...pretrained.maps import Pooling, SequenceView, ViewSummary, batch_maps
from ...pretrained.methods import method_spec
from ...pretrained.model import LoadedModel, output_attentions_note
from ...pretrained.neuron import Neuron
from ...pretrained.results import Generation, PretrainedAttentions
from ..schemas.models import FamilyInfo, ModelInfo
from ..schemas.pretrained import PretrainedAttentionRequest
from ..transport import encode_floats, encode_large


def model_info(entry: ModelEntry) -> ModelInfo:
    """The public description of a model on offer, sizes once it is loaded."""
    info = ModelInfo(name=entry.name, source=entry.source, state=entry.state, error=entry.error)
    model = entry.model
    if model is None:
        return info
    return info.model_copy(
        update={
            "modality": model.modality,
            "family": model.family,
            "architecture": model.architecture,
            "blocks": list(model.blocks),
            "num_layers": model.num_layers,
            "num_heads": model.num_heads,
            "num_key_value_heads": model.num_key_value_heads,
            "d_model": model.d_model,
            "d_ff": model.d_ff,
            "vocab_size": model.vocab_size or None,
            "max_tokens": model.max_tokens,
            "num_parameters": model.num_parameters,
            "chat_template": model.chat_template,
            "can_generate": model.spec.generates,
            "family_spec": FamilyInfo(**model.spec.page()),
            "load_s": model.load_s,
            "dtype": str(model.dtype).removeprefix("torch."),
            "parameter_bytes": model.parameter_bytes,
            "layers_per_device": model.layers_per_device(),
            "device": str(model.home),
            "placed": model.placed,
            "attention_path": model.attention_path,
            "attention_note": attention_note(model),
        }
    )


def ndjson(payload: dict[str, Any]) -> bytes:
    """One line of NDJSON (orjson: numpy arrays natively)."""
    return orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"


def batch_payload(
    model: PretrainedModel,
    request: PretrainedAttentionRequest,
    result: PretrainedAttentions,
    block: Block,
) -> dict[str, Any]:
    """The response for the whole batch: every map of the block at full resolution, padded."""
    maps = batch_maps(result, block)
    queries, keys = result.queries(block), result.keys(block)
    enc = request.encoding
    return {
        **model_fields(
            model,
            block,
            num_layers=result.num_layers(block),
            device=result.device,
            compute_ms=result.compute_ms,
        ),
        "shape": list(maps.attentions.shape),
        "images": images_payload(result.batch),
        "tokens": queries.tokens,
        "key_tokens": keys.tokens if keys is not queries else None,
        "input_ids": queries.input_ids.tolist(),
        "token_type_ids": queries.token_type_ids.tolist(),
        "attention_mask": queries.attention_mask.tolist(),
        "special_tokens_mask": queries.special_tokens_mask.tolist(),
        "lengths": queries.lengths,
        "method": request.method,
        "attentions": encode_large(maps.attentions, enc),
        "head_mean": encode_large(maps.head_mean, enc),
        "layer_mean": encode_large(maps.layer_mean, enc),
        "rollout": None if maps.rollout is None else encode_large(maps.rollout, enc),
        "method_map": (
            None
            if maps.rollout is None or not method_spec(request.method).map_is_rollout
            else encode_large(maps.rollout, enc)
        ),
    }


def sequence_fields(
    model: PretrainedModel,
    request: PretrainedAttentionRequest,
    prepared: PreparedSequence,
    result: PretrainedAttentions | None,
) -> dict[str, Any]:
    """The one-input fields known before any layer's maps: tokens, generation, rows.

    ``result`` is the pass when it has run; None while a walk has yet to run it (the
    streamed grid's start line before an observed pass: ``compute_ms`` 0 and no next
    tokens, which the end line then carries).
    """
    walk, enc = prepared.walk, request.encoding
    tokens, ids, types, special = walk.shown(walk.queries, walk.keep_q)
    key_tokens = walk.shown(walk.keys, walk.keep_k)[0]
    factor, key_factor = walk.factors(len(tokens), len(key_tokens))
    return {
        **model_fields(
            model,
            walk.block,
            num_layers=walk.num_layers,
            device=prepared.device,
            compute_ms=0.0 if result is None else result.compute_ms,
        ),
        "tokens": [tokens],
        "images": images_payload(walk.queries),
        "key_tokens": [key_tokens] if walk.block == "cross" else None,
        "input_ids": [ids],
        "token_type_ids": [types],
        "attention_mask": [[True] * len(tokens)],
        "special_tokens_mask": [special],
        "lengths": [len(tokens)],
        "sequence_index": request.sequence_index,
        "layer_index": request.layer_index,
        "head_index": request.head_index,
        "hidden_special_tokens": request.hide_special_tokens,
        "merged_words": request.merge_words,
        "method": request.method,
        "summed_norm": (
            None if prepared.summed_norm is None else encode_large(prepared.summed_norm, enc)
        ),
        "method_map": (
            None if prepared.method_map is None else encode_large(prepared.method_map, enc)
        ),
        "method_window": (None if prepared.method_window is None else list(prepared.method_window)),
        "ablation": prepared.ablation,
        "head_importance": (
            None
            if prepared.gradients is None or not method_spec(request.method).sends_head_importance
            else encode_large(prepared.gradients.head_importance(walk.block), enc)
        ),
        "target": target_fields(model, prepared.gradients),
        "neuron": neuron_fields(request, prepared.neuron),
        "downsample": downsample(Pooling(factor, key_factor), len(tokens), len(key_tokens)),
        "query_index": request.query_index,
        "query_attentions": (
            None if prepared.query_rows is None else encode_large(prepared.query_rows[:, 0], enc)
        ),
        "generation": (
            None if prepared.generation is None else generation_fields(request, prepared.generation)
        ),
        "next_tokens": next_tokens(model, result, request.top_k, walk.keep_q),
    }


def target_fields(model: PretrainedModel, gradients: GradientPass | None) -> dict[str, Any] | None:
    """The ``target`` object of the response: what a gradient method explained."""
    if gradients is None:
        return None
    target = gradients.target
    return {
        "kind": target.kind,
        "index": target.position,
        "token_id": target.token_id,
        "token": None if target.token_id is None else model.token_strings([target.token_id])[0],
        "value": target.value,
        "compute_ms": gradients.compute_ms,
    }


def neuron_fields(
    request: PretrainedAttentionRequest, step: Neuron | None
) -> dict[str, Any] | None:
    """The ``neuron`` object of the response (request.encoding for its arrays)."""
    if step is None:
        return None
    enc = request.encoding
    return {
        "layer_index": request.layer_index,
        "head_index": request.head_index,
        "query_index": request.query_index,
        "key_value_head": step.key_value_head,
        "d_k": int(step.query.shape[0]),
        "scaling": step.scaling,
        "query": encode_floats(step.query, enc),
        "keys": encode_floats(step.keys, enc),
        "scores": encode_floats(step.scores, enc),
        "scaled_scores": encode_floats(step.scaled_scores, enc),
        "masked": step.masked.tolist(),
        "weights": encode_floats(step.weights, enc),
    }


def sequence_payload(
    model: PretrainedModel,
    request: PretrainedAttentionRequest,
    prepared: PreparedSequence,
    summary: ViewSummary,
) -> dict[str, Any]:
    """The response for one input (sequence_index), with its display options applied."""
    enc, view = request.encoding, summary.view
    attentions = view.attentions[:, None]  # (N', 1, H', P_q, P_k)
    length, key_length = len(view.tokens), len(view.key_tokens)
    return {
        **sequence_fields(model, request, prepared, summary.result),
        "shape": list(attentions.shape),
        "attentions": encode_large(attentions, enc),
        "head_mean": encode_large(view.head_mean[:, None], enc),
        "layer_mean": encode_large(view.layer_mean[None], enc),
        "rollout": None if view.rollout is None else encode_large(view.rollout[None], enc),
        **rollout_method_map(request, view),
        "special_share": view.special_share,
        "average_downsample": downsample(view.average_pooling, length, key_length),
    }


def rollout_method_map(request: PretrainedAttentionRequest, view: SequenceView) -> dict[str, Any]:
    """With method "rollout", ``method_map``: the view's rollout (1, A, A); else nothing."""
    if not method_spec(request.method).map_is_rollout or view.rollout is None:
        return {}
    return {"method_map": encode_large(view.rollout[None], request.encoding)}


def downsample(pooling: Pooling, length: int, key_length: int) -> dict[str, Any] | None:
    """The ``downsample`` object of a pooling, or None when nothing was pooled."""
    if not pooling.pooled:
        return None
    return {
        "method": pooling.method,
        "factor": pooling.factor,
        "key_factor": pooling.key_factor,
        "full_length": length,
        "full_key_length": key_length,
    }


def generation_fields(
    request: PretrainedAttentionRequest, generation: Generation
) -> dict[str, Any]:
    """The ``generation`` object of the response."""
    return {
        "prompt_length": generation.prompt_length,
        "tokens": generation.new_tokens,
        "ids": generation.new_ids,
        "temperature": request.temperature,
        "seed": request.seed,
        "compute_ms": generation.compute_ms,
    }


def next_tokens(
    model: PretrainedModel,
    result: PretrainedAttentions | None,
    top_k: int,
    keep: torch.Tensor | None,
) -> list[list[dict[str, Any]]] | None:
    """The top_k next tokens at each shown position (hidden special tokens left out).

    None without ``top_k``, for a model without next tokens, or before the pass ran.
    """
    if not top_k or result is None or result.next_tokens is None:
        return None
    ids = result.next_tokens.ids[0, :, :top_k]
    probabilities = result.next_tokens.probabilities[0, :, :top_k]
    shown = range(ids.shape[0]) if keep is None else keep.nonzero().flatten().tolist()
    return [
        [
            {
                "token": model.token_strings([int(i)])[0],
                "id": int(i),
                "probability": float(p),
            }
            for i, p in zip(ids[position], probabilities[position], strict=True)
        ]
        for position in shown
    ]


def images_payload(batch: TokenizedBatch) -> list[dict[str, Any]] | None:
    """A vision-language prompt's images (:meth:`.image_tokens.ImageTokens.payload`), else None."""
    return [placed.payload() for placed in batch.images] or None


def model_fields(
    model: PretrainedModel, block: Block, *, num_layers: int, device: str, compute_ms: float
) -> dict[str, Any]:
    """The fields every response has: the model, the block, where and how long (ms) it ran."""
    return {
        "model": model.name,
        "family": model.family,
        "family_spec": model.spec.page(),
        "architecture": model.architecture,
        "block": block,
        "num_layers": num_layers,
        "num_heads": model.num_heads,
        "num_key_value_heads": model.num_key_value_heads,
        "d_model": model.d_model,
        "device": device,
        "compute_ms": compute_ms,
        "attention_path": model.attention_path,
        "attention_note": attention_note(model),
    }


def attention_note(model: LoadedModel) -> str | None:
    """Why a model's maps are its eager output_attentions (None on the fused path)."""
    if model.attention_path != "output_attentions":
        return None
    return output_attentions_note(model.name, model.model)
