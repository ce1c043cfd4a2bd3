"""The tutorials' lessons as API views, under /api/v1/lessons."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

import torch
from fastapi import APIRouter, Query
from fastapi.responses import Response

from ...attention.lessons import (
    DecodingResult,
    decoding_experiment,
    parameter_table,
    scaling_experiment,
)
from ...attention.transformer import compute_transformer
from ..checks import check_cells, check_limits
from ..dependencies import SettingsDep
from ..errors import ERROR_RESPONSES, engine_errors
from ..executor import SEQUENCES, SEQUENCES_ADVICE, computed
from ..limits import MAX_D_MODEL, MAX_NUM_HEADS
from ..schemas.lessons import (
    DecodingRequest,
    DecodingResponse,
    ParameterCountOut,
    ParameterRowOut,
    ParameterTableResponse,
    ScalingCaseOut,
    ScalingRequest,
    ScalingResponse,
    TransformerRequest,
    TransformerResponse,
    WeightStatsOut,
)
from ..transport import encode_large, respond

router = APIRouter(prefix="/api/v1/lessons", tags=["lessons"])


@router.post(
    "/scaling",
    response_model=ScalingResponse,
    responses=ERROR_RESPONSES,
    summary="Why 1/sqrt(d_k): weights with and without the scale",
)
def compute_scaling(request: ScalingRequest) -> ScalingResponse:
    """Tutorial 001 section 7: softmax(Q K^T) of random Q, K, with and without the scale.

    Per d_k: histograms of the weights and their mean row entropy.
    """
    with engine_errors("cpu"):
        cases = scaling_experiment(
            request.d_k_values,
            length=request.length,
            num_samples=request.num_samples,
            bins=request.bins,
            seed=request.seed,
        )
    return ScalingResponse(
        length=request.length,
        num_samples=request.num_samples,
        cases=[
            ScalingCaseOut(
                d_k=case.d_k,
                scaled=WeightStatsOut(**dataclasses.asdict(case.scaled)),
                unscaled=WeightStatsOut(**dataclasses.asdict(case.unscaled)),
            )
            for case in cases
        ],
    )


@router.post(
    "/decoding",
    response_model=DecodingResponse,
    responses=ERROR_RESPONSES,
    summary="Why the causal mask: step-by-step decoding vs one pass",
)
async def compute_decoding(request: DecodingRequest, settings: SettingsDep) -> DecodingResponse:
    """Tutorial 002 section 3.4: step-by-step decoding against one pass.

    One forward pass per prefix, compared with one masked pass (equal) and one
    unmasked pass (not equal).
    """
    check_limits(request, settings)

    def run() -> DecodingResult:
        with engine_errors(request.device):
            return decoding_experiment(request.sequence, request.layer())

    result = await computed("sequence", "a shorter sequence", settings, run)
    return DecodingResponse(
        labels=result.labels,
        step_weights=result.step_weights.tolist(),
        masked_weights=result.masked_weights.tolist(),
        unmasked_weights=result.unmasked_weights.tolist(),
        masked_max_abs_diff=result.masked_max_abs_diff,
        unmasked_max_abs_diff=result.unmasked_max_abs_diff,
        unmasked_output_diff=result.unmasked_output_diff.tolist(),
    )


@router.get(
    "/parameters",
    response_model=ParameterTableResponse,
    responses=ERROR_RESPONSES,
    summary="Parameters per matrix, for every num_heads",
)
def read_parameters(
    d_model: Annotated[int, Query(ge=1, le=MAX_D_MODEL, description="Model width.")] = 8,
    num_heads: Annotated[
        int, Query(ge=1, le=MAX_NUM_HEADS, description="Heads; must divide d_model.")
    ] = 2,
) -> ParameterTableResponse:
    """Tutorial 001 section 5: W_q, W_k, W_v, W_o and biases, counted from the module.

    The total, 4 d_model^2 + 4 d_model, does not change with num_heads.
    """
    with engine_errors("cpu", location="query"):
        table = parameter_table(d_model, num_heads)
    return ParameterTableResponse(
        d_model=table.d_model,
        num_heads=table.num_heads,
        rows=[ParameterRowOut(**dataclasses.asdict(row)) for row in table.rows],
        total=table.total,
        by_num_heads=[
            ParameterCountOut(num_heads=h, d_k=d_k, total=total)
            for h, d_k, total in table.by_num_heads
        ],
    )


@router.post(
    "/transformer",
    response_model=TransformerResponse,
    responses=ERROR_RESPONSES,
    summary="Encoder (and decoder) stack: attention of every layer and head",
)
async def compute_stack(request: TransformerRequest, settings: SettingsDep) -> Response:
    """Tutorial 004's encoder layer stacked N times, and N decoder layers with targets.

    Encoder layer: self-attention, add & norm, feed-forward, add & norm. Decoder
    layer: masked self-attention, cross attention, feed-forward, each with add & norm.
    """
    check_limits(request, settings)
    check_cells(request.weight_cells(), settings.max_weight_cells)
    return await computed(SEQUENCES, SEQUENCES_ADVICE, settings, stack_response, request)


def stack_response(request: TransformerRequest) -> Response:
    """The blocking part of :func:`compute_stack`: compute and serialise."""
    d_ff = request.d_ff or 2 * request.d_model
    with engine_errors(request.device):
        result = compute_transformer(
            request.sequences,
            targets=request.targets,
            d_ff=d_ff,
            num_layers=request.num_layers,
            positional_encoding=request.positional_encoding,
            dtype=request.dtype,
            config=request.layer(),
        )
    enc = request.encoding

    def optional(tensor: torch.Tensor | None) -> Any:
        return None if tensor is None else encode_large(tensor, enc)

    return respond(
        {
            "shape": list(result.encoder_weights.shape),
            "d_model": request.d_model,
            "num_heads": request.num_heads,
            "d_ff": d_ff,
            "num_layers": request.num_layers,
            "positional_encoding": request.positional_encoding,
            "source_labels": result.source_labels,
            "target_labels": result.target_labels,
            "encoder_weights": encode_large(result.encoder_weights, enc),
            "decoder_self_weights": optional(result.decoder_self_weights),
            "cross_weights": optional(result.cross_weights),
            "num_parameters": result.num_parameters,
            "device": result.device,
            "dtype": result.dtype,
            "compute_ms": result.compute_ms,
        }
    )
