"""The body of POST /api/v1/attention: the toy engine's result, selected, pooled, encoded.

Used by the route and by ``attnviz compute`` (the CLI writes the same JSON, and imports no
router). Shapes: B sequences, H heads, L_q x L_k maps (P_q x P_k pooled).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ...attention import compute_attention
from ...attention.engine import STAGE_NAMES
from ...attention.summary import block_labels, block_pool
from ..errors import engine_errors
from ..schemas.attention import AttentionRequest
from ..transport import encode_bools, encode_floats, encode_large, host_floats


def attention_payload(request: AttentionRequest) -> dict[str, Any]:
    """Compute, select, pool and encode: the response body as a dict.

    Raises:
        HTTPException: 422 naming the field the engine refused, 503 out of device memory.
    """
    stage_names = [name for name in request.include if name in STAGE_NAMES]
    with engine_errors(request.device):
        result = compute_attention(
            request.sequences,
            targets=request.targets,
            config=request.layer(),
            mask=request.mask,
            dtype=request.dtype,
            mask_fill=float(request.mask_fill),
            verify=request.verify,
            scale=request.scale,
            stages=stage_names,
            dropout=request.dropout,
            dropout_seed=request.dropout_seed,
        )

    enc = request.encoding
    seqs = (
        slice(None)
        if request.sequence_index is None
        else slice(request.sequence_index, request.sequence_index + 1)
    )
    heads = (
        slice(None)
        if request.head_index is None
        else slice(request.head_index, request.head_index + 1)
    )
    weights = result.attn_weights[seqs, heads]
    mask = result.mask[seqs]
    query_labels = result.query_labels[seqs]
    key_labels = result.key_labels[seqs]
    dropped = None if result.dropped_weights is None else result.dropped_weights[seqs, heads]
    mean = result.head_mean_weights[seqs] if "head_mean" in request.include else None

    downsample = None
    if request.display_size is not None:
        pooled, pooled_mask, factor_q, factor_k = block_pool(
            weights, mask, request.display_size, request.downsample
        )
        if factor_q > 1 or factor_k > 1:
            downsample = {
                "method": request.downsample,
                "factor_q": factor_q,
                "factor_k": factor_k,
                "full_shape": list(result.attn_weights.shape),
            }
            weights, mask = pooled, pooled_mask
            size, method = request.display_size, request.downsample
            if dropped is not None:
                dropped = block_pool(dropped, result.mask[seqs], size, method)[0]
            if mean is not None:
                mean = block_pool(mean[:, None], result.mask[seqs], size, method)[0][:, 0]
            query_labels = [block_labels(labels, factor_q) for labels in query_labels]
            key_labels = [block_labels(labels, factor_k) for labels in key_labels]

    stages: dict[str, Any] = {}
    for name, tensor in result.stages.items():
        tensor = tensor[seqs, heads]
        if name == "masked_scores":  # masked cells travel as null (NaN in binary)
            hidden = ~result.mask[seqs][:, None].expand_as(tensor)
            tensor = tensor.masked_fill(hidden, math.nan)
        stages[name] = encode_large(tensor, enc)

    verification = result.verification
    payload: dict[str, Any] = {
        "attention": "self" if request.targets is None else "cross",
        "shape": list(weights.shape),
        "full_shape": list(result.attn_weights.shape),
        "d_model": request.d_model,
        "num_heads": request.num_heads,
        "d_k": request.d_model // request.num_heads,
        "seed": request.seed,
        "mask": request.mask,
        "pad_id": request.pad_id,
        "query_labels": query_labels,
        "key_labels": key_labels,
        "query_ids": result.query_ids[seqs].tolist(),
        "key_ids": result.key_ids[seqs].tolist(),
        "weights": encode_large(weights, enc),
        "attn_mask": encode_bools(mask, enc),
        "fully_masked": (~mask.any(dim=-1)).tolist(),
        "num_parameters": result.num_parameters,
        "num_embedding_parameters": result.num_embedding_parameters,
        "device": result.device,
        "dtype": result.dtype,
        "compute_ms": result.compute_ms,
        "mask_fill": request.mask_fill,
        "verification": None if verification is None else dataclasses.asdict(verification),
        "scale": result.scale,
        "stages": stages,
        "dropout": result.dropout,
        "dropped_weights": None if dropped is None else encode_large(dropped, enc),
        "head_summary": {
            "entropy_bits": result.head_entropy_bits[seqs, heads].tolist(),
            "max_weight": host_floats(result.head_max_weight[seqs, heads]).tolist(),
            "mean_row_max": host_floats(result.head_mean_row_max[seqs, heads]).tolist(),
            "mean_weights": None if mean is None else encode_floats(mean, enc),
        },
        "downsample": downsample,
    }
    return payload
