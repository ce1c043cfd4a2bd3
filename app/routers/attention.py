"""POST /api/v1/attention: run the engine on one request."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import torch
from fastapi import APIRouter, Depends

from app.attention import compute_attention
from app.config import Settings, get_settings
from app.errors import check_cells, engine_errors
from app.schemas import AttentionRequest, AttentionResponse, HeadSummary, VerificationResult

router = APIRouter(prefix="/api/v1", tags=["attention"])

SettingsDep = Annotated[Settings, Depends(get_settings)]

ERROR_RESPONSES: dict[int | str, dict[str, str]] = {
    413: {"description": "The response would exceed ATTNVIZ_MAX_WEIGHT_CELLS."},
    422: {"description": "Invalid input; `detail[].loc` names the field."},
    503: {"description": "The device ran out of memory."},
}


def masked_as_null(scores: torch.Tensor, mask: torch.Tensor) -> list[object]:
    """(B, H, L_q, L_k) scores as nested lists, None where ``mask`` (B, L_q, L_k) hides a key."""
    hidden = ~mask[:, None].expand_as(scores)
    rows = scores.tolist()
    for b, h, i, j in hidden.nonzero().tolist():
        rows[b][h][i][j] = None
    return rows


@router.post(
    "/attention",
    response_model=AttentionResponse,
    summary="Per-head attention weights of a batch",
    responses=ERROR_RESPONSES,
)
def compute_attention_weights(
    request: AttentionRequest, settings: SettingsDep
) -> AttentionResponse:
    """Run seeded multi-head attention and return every head's weights.

    With ``include``, also the step-through stages; with ``dropout``, the weights
    after dropout; always a per-head summary. Runs in FastAPI's thread pool (a
    plain ``def``), off the event loop.
    """
    check_cells(request.weight_cells(), settings.max_weight_cells)
    with engine_errors(request.device):
        result = compute_attention(
            request.sequences,
            targets=request.targets,
            d_model=request.d_model,
            num_heads=request.num_heads,
            seed=request.seed,
            mask=request.mask,
            pad_id=request.pad_id,
            vocab_size=request.vocab_size,
            device=request.device,
            dtype=request.dtype,
            mask_fill=float(request.mask_fill),
            verify=request.verify,
            scale=request.scale,
            stages=request.include,
            dropout=request.dropout,
            dropout_seed=request.dropout_seed,
        )

    stages = {
        name: masked_as_null(t, result.mask) if name == "masked_scores" else t.tolist()
        for name, t in result.stages.items()
    }
    return AttentionResponse(
        attention="self" if request.targets is None else "cross",
        shape=list(result.attn_weights.shape),
        d_model=request.d_model,
        num_heads=request.num_heads,
        d_k=request.d_model // request.num_heads,
        seed=request.seed,
        mask=request.mask,
        pad_id=request.pad_id,
        query_labels=result.query_labels,
        key_labels=result.key_labels,
        query_ids=result.query_ids.tolist(),
        key_ids=result.key_ids.tolist(),
        weights=result.attn_weights.tolist(),
        attn_mask=result.mask.tolist(),
        fully_masked=result.fully_masked.tolist(),
        num_parameters=result.num_parameters,
        num_embedding_parameters=result.num_embedding_parameters,
        device=result.device,
        dtype=result.dtype,
        compute_ms=result.compute_ms,
        mask_fill=request.mask_fill,
        verification=(
            None
            if result.verification is None
            else VerificationResult(**dataclasses.asdict(result.verification))
        ),
        scale=result.scale,
        stages=stages,
        dropout=result.dropout,
        dropped_weights=None if result.dropped_weights is None else result.dropped_weights.tolist(),
        head_summary=HeadSummary(
            entropy_bits=result.head_entropy_bits.tolist(),
            max_weight=result.head_max_weight.tolist(),
            mean_weights=result.head_mean_weights.tolist(),
        ),
    )
