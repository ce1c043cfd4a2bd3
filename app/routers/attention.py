"""POST /api/v1/attention: run the engine on one request."""

from __future__ import annotations

import dataclasses
import re
from typing import Annotated, Any

import torch
from fastapi import APIRouter, Depends, HTTPException, status

from app.attention import AttentionInputError, compute_attention
from app.config import Settings, get_settings
from app.schemas import AttentionRequest, AttentionResponse, VerificationResult

router = APIRouter(prefix="/api/v1", tags=["attention"])

SettingsDep = Annotated[Settings, Depends(get_settings)]

_FIELD_PART = re.compile(r"[^\[\]]+|\[(\d+)\]")


def field_loc(field: str) -> list[str | int]:
    """``"sequences[3]"`` -> ``["body", "sequences", 3]``, FastAPI's error location form."""
    loc: list[str | int] = ["body"]
    for match in _FIELD_PART.finditer(field):
        loc.append(int(match.group(1)) if match.group(1) else match.group(0))
    return loc


def field_error(status_code: int, field: str, message: str) -> HTTPException:
    """An HTTPException whose detail has the shape of FastAPI's validation errors."""
    detail: list[dict[str, Any]] = [
        {"loc": field_loc(field), "msg": message, "type": "value_error"}
    ]
    return HTTPException(status_code=status_code, detail=detail)


@router.post(
    "/attention",
    response_model=AttentionResponse,
    summary="Per-head attention weights of a batch",
    responses={
        413: {"description": "The response would exceed max_weight_cells."},
        422: {"description": "Invalid input; `detail[].loc` names the field."},
        503: {"description": "The device ran out of memory."},
    },
)
def compute_attention_weights(
    request: AttentionRequest, settings: SettingsDep
) -> AttentionResponse:
    """Run seeded multi-head attention and return every head's weights.

    Runs in FastAPI's thread pool (a plain ``def``), off the event loop.
    """
    cells = request.weight_cells()
    if cells > settings.max_weight_cells:
        raise field_error(
            status.HTTP_413_CONTENT_TOO_LARGE,
            "sequences",
            f"B*H*L_q*L_k = {cells} attention weights exceed the limit of "
            f"{settings.max_weight_cells} (ATTNVIZ_MAX_WEIGHT_CELLS); use fewer or shorter "
            "sequences or fewer heads",
        )
    try:
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
        )
    except AttentionInputError as error:
        raise field_error(
            status.HTTP_422_UNPROCESSABLE_CONTENT, error.field, error.message
        ) from error
    except torch.OutOfMemoryError as error:
        raise field_error(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            "device",
            f"the {request.device} device ran out of memory; try a smaller request",
        ) from error

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
    )
