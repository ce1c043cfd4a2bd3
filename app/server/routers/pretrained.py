"""Pretrained models: GET /api/v1/models and POST /api/v1/models/attention."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, status
from fastapi.responses import Response

from ...pretrained import MODELS, PretrainedAttentions, PretrainedModel
from ...pretrained.display import SequenceView, sequence_view
from ...pretrained.registry import PRETRAINED_EXTRA
from ..dependencies import SettingsDep
from ..errors import ERROR_RESPONSES, engine_errors, field_error
from ..executor import computed, held_while_sent
from ..limits import check_cells, check_limit
from ..schemas.pretrained import (
    ModelInfo,
    ModelListResponse,
    PretrainedAttentionRequest,
    PretrainedAttentionResponse,
)
from ..settings import Settings
from ..transport import encode_large, respond

router = APIRouter(prefix="/api/v1/models", tags=["pretrained models"])


INSTALL_HINT = f"No pretrained model is installed: {PRETRAINED_EXTRA}."


def model_info(model: PretrainedModel) -> ModelInfo:
    """The public description of a loaded model."""
    config = model.config
    return ModelInfo(
        name=model.name,
        source=model.source,
        num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads,
        d_model=config.hidden_size,
        d_ff=config.intermediate_size,
        vocab_size=config.vocab_size,
        max_tokens=model.max_tokens,
        num_parameters=model.num_parameters,
    )


@router.get("", response_model=ModelListResponse, summary="The pretrained models on offer")
def list_models() -> ModelListResponse:
    """Models loaded at start-up: the packaged all-MiniLM-L6-v2 and ATTNVIZ_MODEL_DIRS."""
    models = MODELS.models()
    return ModelListResponse(
        default=models[0].name if models else None,
        models=[model_info(m) for m in models],
        install_hint=None if models else INSTALL_HINT,
    )


@router.post(
    "/attention",
    response_model=PretrainedAttentionResponse,
    responses=ERROR_RESPONSES,
    summary="Attention of every layer and head of a pretrained encoder on real text",
)
async def compute_model_attention(
    request: PretrainedAttentionRequest, settings: SettingsDep
) -> Response:
    """Tokenise the texts with the model's WordPiece tokenizer and run the encoder.

    Returns every layer's and head's attention (N, B, H, L, L), the head mean per
    layer, the mean over all layers and heads, and attention rollout.
    """
    with engine_errors(request.device):
        model = MODELS.get(request.model)
    check_limit("texts", len(request.texts), settings.max_batch_size, "MAX_BATCH_SIZE")
    return await held_while_sent(computed(settings, model_response, model, request, settings))


def model_response(
    model: PretrainedModel, request: PretrainedAttentionRequest, settings: Settings
) -> Response:
    """The blocking part of :func:`compute_model_attention`: tokenise, check, run, serialise.

    Raises:
        HTTPException: 422 naming the field for bad texts, device or display options;
            413 when the response would carry more than ATTNVIZ_MAX_WEIGHT_CELLS numbers
            or an input has more than ATTNVIZ_MAX_SEQ_LEN tokens.
    """
    with engine_errors(request.device):
        batch = model.tokenize(request.texts, request.text_pairs)
        lengths = batch.attention_mask.sum(dim=1).tolist()
        for i, length in enumerate(lengths):
            check_limit(f"texts[{i}]", length, settings.max_seq_len, "MAX_SEQ_LEN")
        if request.sequence_index is None:
            check_display_options(request)
            check_cells(
                model.weight_cells(batch),
                settings.max_weight_cells,
                "texts",
                "use fewer or shorter texts",
            )
            return respond(batch_payload(model, request, model.run(batch, device=request.device)))
        b = request.sequence_index
        if b >= len(request.texts):
            raise field_error(
                status.HTTP_422_UNPROCESSABLE_CONTENT,
                "sequence_index",
                f"{b} is not below {len(request.texts)}",
            )
        alone = batch.select(b)
        check_cells(
            model.weight_cells(alone), settings.max_weight_cells, "texts", "use a shorter text"
        )
        result = model.run(alone, device=request.device)
        view = sequence_view(
            result,
            hide_special_tokens=request.hide_special_tokens,
            layer_index=request.layer_index,
            display_size=request.display_size,
        )
    return respond(sequence_payload(model, request, result, view))


def check_display_options(request: PretrainedAttentionRequest) -> None:
    """Refuse the one-input display options without sequence_index (422 naming them)."""
    for field, value in (
        ("hide_special_tokens", request.hide_special_tokens),
        ("layer_index", request.layer_index),
        ("display_size", request.display_size),
    ):
        if value not in (None, False):
            raise field_error(
                status.HTTP_422_UNPROCESSABLE_CONTENT,
                field,
                "applies to one input: set sequence_index too",
            )


def batch_payload(
    model: PretrainedModel, request: PretrainedAttentionRequest, result: PretrainedAttentions
) -> dict[str, Any]:
    """The response for the whole batch: every map at full resolution, padded."""
    batch, enc = result.batch, request.encoding
    return {
        **model_fields(model, result),
        "shape": list(result.attentions.shape),
        "tokens": batch.tokens,
        "input_ids": batch.input_ids.tolist(),
        "token_type_ids": batch.token_type_ids.tolist(),
        "attention_mask": batch.attention_mask.tolist(),
        "special_tokens_mask": batch.special_tokens_mask.tolist(),
        "lengths": batch.attention_mask.sum(dim=1).tolist(),
        "attentions": encode_large(result.attentions, enc),
        "head_mean": encode_large(result.head_mean, enc),
        "layer_mean": encode_large(result.layer_mean, enc),
        "rollout": encode_large(result.rollout, enc),
    }


def sequence_payload(
    model: PretrainedModel,
    request: PretrainedAttentionRequest,
    result: PretrainedAttentions,
    view: SequenceView,
) -> dict[str, Any]:
    """The response for one input (sequence_index), with its display options applied."""
    enc = request.encoding
    attentions = view.attentions[:, None]  # (N', 1, H, P, P)
    length = len(view.tokens)
    return {
        **model_fields(model, result),
        "shape": list(attentions.shape),
        "tokens": [view.tokens],
        "input_ids": [view.input_ids],
        "token_type_ids": [view.token_type_ids],
        "attention_mask": [[True] * length],
        "special_tokens_mask": [view.special_tokens_mask],
        "lengths": [length],
        "attentions": encode_large(attentions, enc),
        "head_mean": encode_large(view.head_mean[:, None], enc),
        "layer_mean": encode_large(view.layer_mean[None], enc),
        "rollout": encode_large(view.rollout[None], enc),
        "sequence_index": request.sequence_index,
        "layer_index": request.layer_index,
        "hidden_special_tokens": view.hidden_special_tokens,
        "special_share": view.special_share,
        "downsample": (
            None
            if view.factor == 1
            else {"method": "max", "factor": view.factor, "full_length": length}
        ),
    }


def model_fields(model: PretrainedModel, result: PretrainedAttentions) -> dict[str, Any]:
    """The fields every response has: the model and where and how long it ran."""
    config = model.config
    return {
        "model": model.name,
        "num_layers": config.num_hidden_layers,
        "num_heads": config.num_attention_heads,
        "d_model": config.hidden_size,
        "device": result.device,
        "compute_ms": result.compute_ms,
    }
