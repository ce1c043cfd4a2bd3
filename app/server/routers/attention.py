"""POST /api/v1/attention: run the engine on one request."""

from __future__ import annotations

from fastapi import APIRouter, status
from fastapi.responses import Response

from ..checks import check_cells, check_limits
from ..dependencies import SettingsDep
from ..errors import ERROR_RESPONSES, field_error
from ..executor import SEQUENCES, SEQUENCES_ADVICE, computed, held_while_sent
from ..payloads.attention import attention_payload
from ..response_cache import RESPONSES
from ..schemas.attention import AttentionRequest, AttentionResponse
from ..transport import (
    STREAM_MIN_CELLS,
    respond,
)

router = APIRouter(prefix="/api/v1", tags=["attention"])


def check_selection(request: AttentionRequest) -> None:
    """Refuse a sequence_index or head_index outside the batch (422 naming it)."""
    for field, index, size in (
        ("sequence_index", request.sequence_index, len(request.sequences)),
        ("head_index", request.head_index, request.num_heads),
    ):
        if index is not None and index >= size:
            raise field_error(
                status.HTTP_422_UNPROCESSABLE_CONTENT, field, f"{index} is not below {size}"
            )


@router.post(
    "/attention",
    response_model=AttentionResponse,
    summary="Per-head attention weights of a batch",
    responses=ERROR_RESPONSES,
)
async def compute_attention_weights(request: AttentionRequest, settings: SettingsDep) -> Response:
    """Run seeded multi-head attention and return every head's weights.

    With ``include``, also the step-through stages; with ``dropout``, the weights
    after dropout; always a per-head summary. ``sequence_index`` / ``head_index``
    select, ``display_size`` block-pools for display, ``encoding`` picks JSON
    numbers or base64 typed arrays. The work runs on the compute executor
    (:mod:`attnviz.server.executor`), off the event loop; the body is serialised by orjson.
    Repeated requests are answered from :mod:`attnviz.server.response_cache`.
    """
    check_limits(request, settings)
    check_cells(request.weight_cells(), settings.max_weight_cells)
    check_selection(request)
    key = request.model_dump_json()
    cached = RESPONSES.get(key)
    if cached is not None:
        return Response(cached, media_type="application/json", headers={"X-AttnViz-Cache": "hit"})
    if request.weight_cells() < STREAM_MIN_CELLS:
        response = await computed(
            SEQUENCES, SEQUENCES_ADVICE, settings, attention_response, request
        )
        RESPONSES.put(key, bytes(response.body))
        return response
    return await held_while_sent(
        computed(SEQUENCES, SEQUENCES_ADVICE, settings, attention_response, request)
    )


def attention_response(request: AttentionRequest) -> Response:
    """The blocking part of :func:`compute_attention_weights`: compute and serialise.

    Arrays of a million numbers or more are encoded while the response streams
    (:class:`attnviz.server.transport.Deferred`), so their whole JSON or base64 text never
    sits in memory beside them.
    """
    return respond(attention_payload(request))
