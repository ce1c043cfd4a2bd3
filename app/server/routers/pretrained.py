"""Pretrained models: GET /api/v1/models, POST /api/v1/models/attention and /attention/layers."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Final

import orjson
import torch
from fastapi import APIRouter, HTTPException, status
from fastapi.responses import Response, StreamingResponse

from ...attention.cancellation import ComputeCancelledError
from ...attention.errors import AttentionInputError
from ...pretrained import MODELS, ModelEntry, ModelNotReady, PretrainedModel, TokenizedBatch
from ...pretrained.admission import (
    InputLengths,
    check_memory,
    check_options,
    check_positions,
    device_free_bytes,
)
from ...pretrained.admission import recording_bytes as estimated_recording_bytes
from ...pretrained.blocks import Block
from ...pretrained.display import (
    MAX_AVERAGE_SIZE,
    LayerWalk,
    Pooling,
    SequenceView,
    batch_maps,
    pooled,
)
from ...pretrained.gradients import GradientPass
from ...pretrained.loading import PRETRAINED_EXTRA
from ...pretrained.methods import (
    GRADIENT_METHODS,
    NormRecording,
    attention_flow,
    with_method,
)
from ...pretrained.recorder import AttentionRecording, Neuron
from ...pretrained.recordings import RECORDINGS
from ...pretrained.results import Generation, PretrainedAttentions
from ...pretrained.zeroing import value_zeroing
from ..dependencies import SettingsDep
from ..errors import ERROR_RESPONSES, engine_errors, field_error, field_loc, out_of_memory
from ..executor import computed, held_while_sent
from ..limits import check_cells, check_limit
from ..schemas.pretrained import (
    ModelInfo,
    ModelListResponse,
    PretrainedAttentionRequest,
    PretrainedAttentionResponse,
    PretrainedLayersRequest,
)
from ..settings import Settings
from ..transport import encode_floats, encode_large, respond

router = APIRouter(prefix="/api/v1/models", tags=["pretrained models"])


INSTALL_HINT = f"No pretrained model is installed: {PRETRAINED_EXTRA}."
RETRY_AFTER_S = 2
"""What a 503 for a model still loading tells the client to wait, in seconds."""
ONE_INPUT_OPTIONS = (
    "hide_special_tokens",
    "merge_words",
    "neuron",
    "layer_index",
    "head_index",
    "display_size",
    "query_index",
    "max_new_tokens",
    "top_k",
    "ablate",
)
"""Request options that apply to one input, so need sequence_index."""
ONE_INPUT_METHODS: Final = frozenset({"flow", "value_zeroing", *GRADIENT_METHODS})
"""Methods computed for one input, so needing sequence_index."""
TARGET_OPTIONS: Final = ("target_index", "target_token_id")
"""Request options that choose a gradient method's target."""

ABLATION_TOP: Final = 5
"""Next tokens shown before and after an ablation, per position."""


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
            "can_generate": model.family == "decoder",
            "load_s": model.load_s,
            "dtype": str(model.dtype).removeprefix("torch."),
            "parameter_bytes": model.parameter_bytes,
            "layers_per_device": model.layers_per_device(),
            "device": str(model.home),
            "placed": model.placed,
        }
    )


@router.get("", response_model=ModelListResponse, summary="The pretrained models on offer")
def list_models() -> ModelListResponse:
    """The packaged models (all-MiniLM-L6-v2, SmolLM2-135M-Instruct) and ATTNVIZ_MODEL_DIRS.

    Models load in the background after start-up; each says whether it is loading,
    ready, or failed (with the reason).
    """
    entries = MODELS.entries()
    return ModelListResponse(
        default=entries[0].name if entries else None,
        models=[model_info(e) for e in entries],
        loading=any(e.state == "loading" for e in entries),
        install_hint=None if entries else INSTALL_HINT,
    )


MODALITY_ROUTES: Final = {
    "text": "POST /api/v1/models/attention",
    "speech": "POST /api/v1/speech (multipart: audio)",
    "image": "POST /api/v1/vision (multipart: image)",
}
"""Where each kind of model takes its input, for the 422 of a model sent the wrong kind."""


def ready_model(name: str | None, modality: str = "text") -> PretrainedModel:
    """The model a request names, or an HTTP error: 422 unknown or failed, 503 loading.

    A model of another modality (a speech model sent text) is a 422 too. With ``name``
    None: the default (first) model for text, the first ready model of
    the modality otherwise.

    Raises:
        HTTPException: as above; the 503 carries Retry-After.
    """
    try:
        with engine_errors("cpu"):
            if name is None and modality != "text":
                name = MODELS.first_of(modality)
            model = MODELS.get(name)
            model.require(modality, MODALITY_ROUTES[model.modality])
            return model
    except ModelNotReady as error:
        raise HTTPException(
            status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
            detail=[{"loc": field_loc("model", "body"), "msg": str(error), "type": "loading"}],
            headers={"Retry-After": str(RETRY_AFTER_S)},
        ) from error


@router.post(
    "/attention",
    response_model=PretrainedAttentionResponse,
    responses=ERROR_RESPONSES,
    summary="Attention of every layer and head of a pretrained model on real text",
)
async def compute_model_attention(
    request: PretrainedAttentionRequest, settings: SettingsDep
) -> Response:
    """Tokenise the texts with the model's own tokenizer and run it, recording attention.

    For the whole batch: every layer's and head's attention (N, B, H, L_q, L_k) of the
    chosen block, the head mean per layer, the mean over all layers and heads, and
    attention rollout. With ``sequence_index``, one input run alone, with the display
    options (hidden special tokens, one layer or head, pooling, a query's rows, a
    decoder's generation and next-token candidates).
    """
    return await answered(model_response, request, settings)


def model_response(
    model: PretrainedModel, request: PretrainedAttentionRequest, settings: Settings
) -> Response:
    """The blocking part of :func:`compute_model_attention`: tokenise, check, run, serialise.

    Raises:
        HTTPException: 422 naming the field for bad texts, device, block or display
            options; 413 when the response would carry more than
            ATTNVIZ_MAX_WEIGHT_CELLS numbers or an input has more than
            ATTNVIZ_MAX_SEQ_LEN tokens.
    """
    batch, targets, block = tokenized(model, request, settings)
    if request.sequence_index is None:
        check_one_input_options(request)
        check_cells(
            model.weight_cells(batch, targets),
            settings.max_weight_cells,
            "texts",
            "use fewer or shorter texts",
        )
        with engine_errors(request.device):
            result = model.run(batch, targets, device=request.device)
            result = with_method(result, model.on(torch.device(result.device)), request.method)
        return respond(batch_payload(model, request, result, block))
    prepared = prepare_sequence(model, request, batch, targets, block, settings, observe=True)
    with engine_errors(request.device):
        view = prepared.walk.view()
    # an observed pass's own result (its next tokens, its time) replaces the placeholder
    prepared = replace(prepared, result=prepared.walk.result)
    return respond(sequence_payload(model, request, prepared, view))


@router.post(
    "/attention/layers",
    responses={
        **ERROR_RESPONSES,
        200: {
            "description": "NDJSON: a `start` line, one `layer` line per layer, an `end` line.",
            "content": {"application/x-ndjson": {}},
        },
    },
    response_class=StreamingResponse,
    summary="One input's layers x heads grid, streamed layer by layer as it is computed",
)
async def stream_model_attention(
    request: PretrainedLayersRequest, settings: SettingsDep
) -> Response:
    """The one-input response of POST /attention (sequence_index, default 0), as NDJSON lines.

    The forward pass runs first (or is reused from the last requests of the same
    input); then each layer's maps are computed, pooled and sent as soon as they are
    ready, so a page draws the first layer before the last is computed:

    * ``{"type": "start", ...}``: every field of the one-input response known before
      the maps (model, tokens, generation, next_tokens, query_attentions, downsample);
    * ``{"type": "layer", "layer": l, "attentions": (H', P_q, P_k), "head_mean":
      (P_q, P_k)}`` for each shown layer, in order;
    * ``{"type": "end", "shape", "layer_mean", "rollout", "special_share",
      "average_downsample", "total_ms"}``.

    A failure after the start line (never expected) ends the stream with
    ``{"type": "error", "detail": ...}``.
    """
    return await answered(stream_response, request, settings)


async def answered(
    respond_with: Callable[[PretrainedModel, Any, Settings], Response],
    request: PretrainedAttentionRequest,
    settings: Settings,
) -> Response:
    """Admit a request (model ready, batch within bounds), then compute its response.

    The response is computed on the pool within the time budget, holding a large-request
    slot while it is sent.
    """
    model = ready_model(request.model)
    check_limit("texts", len(request.texts), settings.max_batch_size, "MAX_BATCH_SIZE")
    b = request.sequence_index
    if b is not None and b >= len(request.texts):
        raise field_error(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            "sequence_index",
            f"{b} is not below {len(request.texts)}",
        )
    return await held_while_sent(
        computed(
            "texts", "fewer or shorter texts", settings, respond_with, model, request, settings
        )
    )


def stream_response(
    model: PretrainedModel, request: PretrainedAttentionRequest, settings: Settings
) -> StreamingResponse:
    """The blocking part of :func:`stream_model_attention`: run, then stream each layer."""
    started = time.perf_counter()
    batch, targets, block = tokenized(model, request, settings)
    prepared = prepare_sequence(model, request, batch, targets, block, settings, observe=True)
    enc = request.encoding

    walk = prepared.walk
    # The time budget covers the stream too: a walk (and an observed pass) running past
    # it stops, and the stream ends with an error line saying so.
    budget = settings.compute_timeout_s
    walk.deadline = (
        time.monotonic() + budget - (time.perf_counter() - started),
        f"the computation took longer than {budget:g} s (ATTNVIZ_COMPUTE_TIMEOUT_S) and was "
        "stopped; try fewer or shorter texts",
    )

    def lines() -> Iterator[bytes]:
        observed = walk.observed
        yield ndjson({"type": "start", **sequence_fields(model, request, prepared)})
        try:
            for maps in walk.layers():
                yield ndjson(
                    {
                        "type": "layer",
                        "layer": maps.layer,
                        "attentions": encode_floats(maps.attentions, enc),
                        "head_mean": encode_floats(maps.head_mean, enc),
                    }
                )
            view = walk.view()
        except torch.OutOfMemoryError:
            yield ndjson({"type": "error", "detail": out_of_memory(request.device)})
            return
        except (AttentionInputError, ComputeCancelledError, RuntimeError, ValueError) as error:
            yield ndjson({"type": "error", "detail": str(error)})
            return
        # An observed pass ran while the layers were sent: its time and next tokens
        # come last (the start line has compute_ms 0 and next_tokens null).
        late = (
            {
                "compute_ms": walk.result.compute_ms,
                "next_tokens": next_tokens(model, walk.result, request.top_k, walk.keep_q),
            }
            if observed
            else {}
        )
        yield ndjson(
            {
                "type": "end",
                **late,
                "shape": list(view.attentions[:, None].shape),
                "layer_mean": encode_floats(view.layer_mean[None], enc),
                "rollout": None if view.rollout is None else encode_floats(view.rollout[None], enc),
                **rollout_method_map(request, view),
                "special_share": view.special_share,
                "average_downsample": downsample(
                    view.average_pooling, len(view.tokens), len(view.key_tokens)
                ),
                "total_ms": (time.perf_counter() - started) * 1000.0,
            }
        )

    return StreamingResponse(lines(), media_type="application/x-ndjson")


def ndjson(payload: dict[str, Any]) -> bytes:
    """One line of NDJSON (orjson: numpy arrays natively)."""
    return orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"


def tokenized(
    model: PretrainedModel, request: PretrainedAttentionRequest, settings: Settings
) -> tuple[TokenizedBatch, TokenizedBatch | None, Block]:
    """The request's texts (and targets) tokenised and checked, and the block it asks for.

    Raises:
        HTTPException: 422 naming texts, text_pairs, chat, targets or block; 413 over
            ATTNVIZ_MAX_SEQ_LEN.
    """
    with engine_errors(request.device):
        batch = model.tokenize(request.texts, request.text_pairs, chat=request.chat)
        targets = None if request.targets is None else model.decoder_inputs(request.targets)
    if targets is not None and len(request.targets or []) != len(request.texts):
        raise field_error(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            "targets",
            f"{len(request.targets or [])} targets for {len(request.texts)} texts; "
            "give one per text",
        )
    check_lengths(batch, "texts", settings)
    if targets is not None:
        check_lengths(targets, "targets", settings)
    if request.block is not None and request.block not in model.blocks:
        raise field_error(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            "block",
            f"{request.block!r}: {model.name} is {model.described} with blocks "
            f"{', '.join(model.blocks)}",
        )
    return batch, targets, request.block or model.blocks[0]


@dataclass(frozen=True)
class PreparedSequence:
    """One input run (or taken from the recording cache), its display walk not yet run.

    Attributes:
        result: the recorded forward pass of the input (prompt + generated tokens).
        walk: the display choices, to run layer by layer.
        generation: what a decoder generated first, else None.
        query_rows: (N, H, L_k) the rows of query_index, else None.
        neuron: with ``neuron``, the step through the head, else None.
        summed_norm: with method "norm" and layer_index, (1, P_q, P_k) the layer's
            ‖Σ_h α f(x)‖ pooled as the head means, else None.
        method_map: with method "flow" or "grad_rollout", (1, L, L); "value_zeroing",
            (N, L_q, L_k); else None ("rollout" takes the view's).
        ablation: with ablate, what switching the heads off changed (``ablation_fields``).
        gradients: with a gradient method, its backward pass, else None.
    """

    result: PretrainedAttentions
    walk: LayerWalk
    generation: Generation | None
    query_rows: torch.Tensor | None
    neuron: Neuron | None = None
    summed_norm: torch.Tensor | None = None
    method_map: torch.Tensor | None = None
    ablation: dict[str, Any] | None = None
    gradients: GradientPass | None = None


def prepare_sequence(
    model: PretrainedModel,
    request: PretrainedAttentionRequest,
    batch: TokenizedBatch,
    targets: TokenizedBatch | None,
    block: Block,
    settings: Settings,
    *,
    observe: bool = False,
) -> PreparedSequence:
    """Check the one-input options, generate when asked, run (or reuse) the forward pass.

    With ``observe``, a plain request (the weights, pooled to a display size or one head,
    no ablation, query or neuron) whose pass is not kept runs no pass here: its walk runs
    it, observed (:class:`attnviz.pretrained.display.WalkObserver`), the maps built during
    the pass, so that a stream sends each layer as soon as the pass has computed it.

    Every option is checked before anything runs, against the model's config and the
    tokenised length (plus ``max_new_tokens`` with generation): indices, method bounds,
    the response's size and the memory the request would need
    (:mod:`attnviz.pretrained.admission`).

    Raises:
        HTTPException: 422 naming a bad option; 413 over ATTNVIZ_MAX_WEIGHT_CELLS,
            ATTNVIZ_MAX_SEQ_LEN (prompt + new tokens) or ATTNVIZ_MAX_REQUEST_BYTES.
    """
    b = request.sequence_index
    assert b is not None  # and below len(texts): checked by answered()
    if request.head_index is not None and request.layer_index is None:
        raise field_error(
            status.HTTP_422_UNPROCESSABLE_CONTENT, "head_index", "set layer_index too"
        )
    if request.merge_words:
        for field in ("query_index", "top_k"):
            if getattr(request, field) not in (None, 0):
                raise field_error(
                    status.HTTP_422_UNPROCESSABLE_CONTENT,
                    field,
                    "counts tokens: not with merge_words (send it without merge_words)",
                )
    if request.neuron:
        for field in ("layer_index", "head_index", "query_index"):
            if getattr(request, field) is None:
                raise field_error(
                    status.HTTP_422_UNPROCESSABLE_CONTENT, "neuron", f"set {field} too"
                )
        for field in ("hide_special_tokens", "merge_words"):
            if getattr(request, field):
                raise field_error(
                    status.HTTP_422_UNPROCESSABLE_CONTENT,
                    field,
                    "not with neuron (its positions count every token)",
                )
    if request.method != "attention":
        for field in ("neuron", "hide_special_tokens", "merge_words"):
            if getattr(request, field):
                raise field_error(
                    status.HTTP_422_UNPROCESSABLE_CONTENT,
                    field,
                    f"not with method {request.method!r} (it works on the softmax weights)",
                )
    check_method_options(model, request, block)
    if request.ablate:
        for field in ("hide_special_tokens", "merge_words"):
            if getattr(request, field):
                raise field_error(
                    status.HTTP_422_UNPROCESSABLE_CONTENT,
                    field,
                    "not with ablate (its positions count every token)",
                )
    if request.top_k and model.family != "decoder":
        raise field_error(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            "top_k",
            f"next tokens are for decoders; {model.name} is {model.described}",
        )
    alone = batch.select(b)
    alone_targets = None if targets is None else targets.select(b)
    lengths = InputLengths(
        source=int(alone.input_ids.shape[1]),
        target=None if alone_targets is None else int(alone_targets.input_ids.shape[1]),
        new_tokens=request.max_new_tokens,
    )
    with engine_errors(request.device):
        check_generation_length(model, lengths, settings)
        check_options(
            model,
            block,
            lengths,
            layer_index=request.layer_index,
            head_index=request.head_index,
            query_index=request.query_index,
            ablate=request.ablate,
            method=request.method,
            target_index=request.target_index,
            target_token_id=request.target_token_id,
        )
        check_view_cells(model, request, lengths, block, settings)
        run_on = model.device_for(request.device)
        # With generation, the new tokens come from an unrecorded, key/value-cached run
        # (SDPA), then one observed pass covers prompt + new tokens.
        memory = functools.partial(
            check_memory,
            model,
            lengths,
            settings.max_request_bytes,
            block=block,
            runs=2 if request.ablate else 1,
            display_size=request.display_size,
            method=request.method,
            free_bytes=device_free_bytes(run_on),
            device=str(run_on),
            layer_index=request.layer_index,
            head_index=request.head_index,
        )
        observing = (
            observe
            and not request.ablate
            and request.method == "attention"
            and (request.display_size is not None or request.head_index is not None)
            and request.query_index is None
            and not request.neuron
            and RECORDINGS.kept(model, alone, alone_targets, device=request.device) is None
        )
        recorded = (
            not observing or estimated_recording_bytes(model, lengths) <= RECORDINGS.max_bytes
        )
        memory(observed=observing, recorded=recorded)
        generation = None
        if request.max_new_tokens:
            generation = RECORDINGS.generate(
                model,
                alone,
                request.max_new_tokens,
                temperature=request.temperature,
                seed=request.seed,
                device=request.device,
                record_pass=not observing,
            )
            alone = model.extended(alone, generation.new_ids)
            check_positions(
                replace(lengths, new_tokens=len(generation.new_ids)),
                query_index=request.query_index,
                target_index=request.target_index,
            )
        pending = None
        if observing:
            result, pending = observed_pass(
                model, alone, alone_targets, request.device, record=recorded
            )
        else:
            result = (
                generation.result
                if generation is not None and generation.result is not None
                else RECORDINGS.run(model, alone, alone_targets, device=request.device)
            )
        ablation = None
        switched = None
        if request.ablate:
            intact = result
            switched = ablated_modules(intact, block, request.ablate)
            result = RECORDINGS.run(
                model, alone, alone_targets, device=request.device, ablate=switched
            )
            ablation = ablation_fields(model, request.ablate, intact, result)
        result = with_method(result, model.on(torch.device(result.device)), request.method)
        walk = LayerWalk(
            result,
            block=block,
            hide_special_tokens=request.hide_special_tokens,
            layer_index=request.layer_index,
            head_index=request.head_index,
            display_size=request.display_size,
            merge_words=request.merge_words,
            pending=pending,
            block_of=model.block_of(model.on(torch.device(result.device))),
        )
        query_rows = None
        if request.query_index is not None:
            query_rows = result.query_rows(block, request.query_index)
        step = None
        if request.neuron:
            assert request.layer_index is not None and request.head_index is not None
            assert request.query_index is not None
            step = result.neuron(
                block, request.layer_index, request.head_index, request.query_index
            )
        summed = None
        if isinstance(result.recording, NormRecording) and request.layer_index is not None:
            summed = layer_summed_norm(result, block, request)
        method_map = None
        if request.method == "flow":
            method_map = flow_map(result, block)
        gradients = None
        if request.method in GRADIENT_METHODS:
            gradients = RECORDINGS.gradients(
                model,
                alone,
                alone_targets,
                position=request.target_index,
                token_id=request.target_token_id,
                device=request.device,
                ablate=switched,
            )
            if request.method == "grad_rollout":
                method_map = pooled(gradients.rollout(block), MAX_AVERAGE_SIZE)[0]
        if request.method == "value_zeroing":
            memo = result.memo.setdefault(("value_zeroing", block), {})
            if "maps" not in memo:
                memo["maps"] = value_zeroing(
                    model, result, block, device=request.device, ablate=switched
                )
            method_map = memo["maps"]
    return PreparedSequence(
        result, walk, generation, query_rows, step, summed, method_map, ablation, gradients
    )


def observed_pass(
    model: PretrainedModel,
    batch: TokenizedBatch,
    targets: TokenizedBatch | None,
    device: str,
    *,
    record: bool,
) -> tuple[PretrainedAttentions, Callable[[Any], PretrainedAttentions]]:
    """A placeholder result (no recording yet) and the observed pass that will replace it.

    With ``record`` (the states fit the recording cache) the pass records the query,
    key and value states too, so that a later click reuses them; else nothing.

    Raises:
        AttentionInputError: (field ``device``) as :meth:`.model.PretrainedModel.device_for`.
    """
    run_on = model.device_for(device)
    placeholder = PretrainedAttentions(
        batch=batch,
        targets=targets,
        recording=AttentionRecording(),
        block_calls={b: list(range(model.block_layers(b))) for b in model.blocks},
        decoder_head=None,
        compute_ms=0.0,
        device=str(run_on),
    )

    def run(observer: Any) -> PretrainedAttentions:
        return RECORDINGS.observed(model, batch, targets, observer, device=device, record=record)

    return placeholder, run


def check_method_options(
    model: PretrainedModel, request: PretrainedAttentionRequest, block: Block
) -> None:
    """Refuse what a method cannot do for this model, block and input (422 naming the field)."""
    for field in TARGET_OPTIONS:
        if getattr(request, field) is not None and request.method not in GRADIENT_METHODS:
            raise field_error(
                status.HTTP_422_UNPROCESSABLE_CONTENT,
                field,
                "chooses the target of method 'grad_rollout' or 'head_importance', not "
                f"of {request.method!r}",
            )
    if request.method in ("rollout", "grad_rollout") and block == "cross":
        raise field_error(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            "block",
            f"{request.method} runs through square self-attention: not 'cross'",
        )


def ablated_modules(
    result: PretrainedAttentions, block: Block, heads: list[list[int]]
) -> dict[int, tuple[int, ...]]:
    """``[[layer, head], ...]`` of ``block`` as ``id(attention module)`` -> query heads.

    Raises:
        AttentionInputError: (field ``ablate``) a layer or head the block does not have.
    """
    layers = result.num_layers(block)
    switched: dict[int, set[int]] = {}
    for layer, head in heads:
        if layer >= layers:
            raise AttentionInputError("ablate", f"layer {layer} is not below {layers}")
        count = result.num_heads(block, layer)
        if head >= count:
            raise AttentionInputError("ablate", f"head {head} is not below {count}")
        module = result.recording.calls[result.block_calls[block][layer]].module
        switched.setdefault(id(module), set()).add(head)
    return {key: tuple(sorted(value)) for key, value in switched.items()}


def ablation_fields(
    model: PretrainedModel,
    heads: list[list[int]],
    intact: PretrainedAttentions,
    ablated: PretrainedAttentions,
) -> dict[str, Any]:
    """What switching ``heads`` off did to the output (the response's ``ablation``)."""
    fields: dict[str, Any] = {"heads": sorted({(layer, head) for layer, head in heads})}
    # The positions of the per-token fields: an encoder-decoder's targets, else the input.
    fields["tokens"] = (intact.targets or intact.batch).tokens[0]
    if intact.decoder_head is not None and ablated.decoder_head is not None:
        fields["kl"] = intact.decoder_head.divergence(ablated.decoder_head)[0].tolist()
        for name, result in (("top_before", intact), ("top_after", ablated)):
            top = result.next_tokens
            assert top is not None
            fields[name] = [
                [
                    {
                        "token": model.token_strings([int(i)])[0],
                        "id": int(i),
                        "probability": float(p),
                    }
                    for i, p in zip(ids[:ABLATION_TOP], probs[:ABLATION_TOP], strict=True)
                ]
                for ids, probs in zip(top.ids[0], top.probabilities[0], strict=True)
            ]
    if intact.final_hidden is not None and ablated.final_hidden is not None:
        before, after = intact.final_hidden[0], ablated.final_hidden[0]
        change = (after - before).norm(dim=-1) / before.norm(dim=-1).clamp_min(1e-12)
        fields["hidden_change"] = change.tolist()
    return fields


def flow_map(result: PretrainedAttentions, block: Block) -> torch.Tensor:
    """Attention flow (:func:`.methods.attention_flow`) of ``block`` for the one input.

    The input's length was checked against :data:`.methods.MAX_FLOW_WORK` before it ran
    (:func:`attnviz.pretrained.admission.check_options`).

    Raises:
        AttentionInputError: (field ``block``) cross attention (not square).
    """
    if block == "cross":
        raise AttentionInputError(
            "block", "attention flow runs through square self-attention: not 'cross'"
        )
    layers = result.num_layers(block)
    means = torch.stack(
        [result.layer_weights(block, layer)[0].mean(dim=0) for layer in range(layers)]
    )
    return attention_flow(means)[None]


def layer_summed_norm(
    result: PretrainedAttentions, block: Block, request: PretrainedAttentionRequest
) -> torch.Tensor:
    """Layer layer_index's ‖Σ_h α_ij^h f^h(x_j)‖ (method "norm"), pooled as the head means.

    The layer and the input's length (MAX_SUMMED_NORM_TOKENS) were checked before it ran
    (:func:`attnviz.pretrained.admission.check_options`).
    """
    assert isinstance(result.recording, NormRecording) and request.layer_index is not None
    call = result.block_calls[block][request.layer_index]
    return pooled(result.recording.summed_norm(call), request.display_size)[0]


def check_lengths(batch: TokenizedBatch, field: str, settings: Settings) -> None:
    """Refuse an input longer than ATTNVIZ_MAX_SEQ_LEN tokens (413 naming ``field[i]``)."""
    for i, length in enumerate(batch.lengths):
        check_limit(f"{field}[{i}]", length, settings.max_seq_len, "MAX_SEQ_LEN")


def check_one_input_options(request: PretrainedAttentionRequest) -> None:
    """Refuse the one-input options without sequence_index (422 naming them)."""
    for field in ONE_INPUT_OPTIONS:
        if getattr(request, field) not in (None, False, 0):
            raise field_error(
                status.HTTP_422_UNPROCESSABLE_CONTENT,
                field,
                "applies to one input: set sequence_index too",
            )
    if request.method in ONE_INPUT_METHODS:
        raise field_error(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            "method",
            f"{request.method!r} is computed for one input: set sequence_index too",
        )
    for field in TARGET_OPTIONS:
        if getattr(request, field) is not None:
            raise field_error(
                status.HTTP_422_UNPROCESSABLE_CONTENT,
                field,
                "chooses a gradient method's target, for one input: set sequence_index too",
            )


def check_view_cells(
    model: PretrainedModel,
    request: PretrainedAttentionRequest,
    lengths: InputLengths,
    block: Block,
    settings: Settings,
) -> None:
    """Refuse a one-input response that would carry over ATTNVIZ_MAX_WEIGHT_CELLS numbers.

    Counts what is sent, after selection and pooling, not what is computed: layers
    (1 with layer_index) x heads (1 with head_index) x the shown side squared, plus
    the head means, the layer mean and rollout. With generation, at the most tokens it
    may add (checked before it runs).
    """
    len_q, len_k = lengths.queries(block), lengths.keys(block)
    side = request.display_size
    p_q, p_k = (len_q, len_k) if side is None else (min(len_q, side), min(len_k, side))
    num_layers, num_heads = model.block_layers(block), model.block_heads(block)
    layers = 1 if request.layer_index is not None else num_layers
    heads = 1 if request.head_index is not None else num_heads
    averages = 2 * min(len_q, MAX_AVERAGE_SIZE) * min(len_k, MAX_AVERAGE_SIZE)
    rows = 0 if request.query_index is None else num_layers * num_heads * len_k
    means = layers * (
        p_q * p_k
        if request.head_index is None
        else min(p_q, MAX_AVERAGE_SIZE) * min(p_k, MAX_AVERAGE_SIZE)
    )
    cells = layers * heads * p_q * p_k + means + averages + rows
    check_cells(cells, settings.max_weight_cells, "texts", "set display_size or layer_index")


def check_generation_length(
    model: PretrainedModel, lengths: InputLengths, settings: Settings
) -> None:
    """Refuse generation past ATTNVIZ_MAX_SEQ_LEN or the model's positions, before it runs.

    The prompt was checked alone (:func:`check_lengths`); with ``max_new_tokens`` the
    recorded pass covers prompt + new tokens, which must fit too.

    Raises:
        HTTPException: 413 naming max_new_tokens over ATTNVIZ_MAX_SEQ_LEN.
        AttentionInputError: (field ``max_new_tokens``) over the model's positions.
    """
    if not lengths.new_tokens:
        return
    room = settings.max_seq_len - lengths.source
    if lengths.total > settings.max_seq_len:
        raise field_error(
            status.HTTP_413_CONTENT_TOO_LARGE,
            "max_new_tokens",
            f"the prompt has {lengths.source} tokens and {lengths.new_tokens} new ones would "
            f"make {lengths.total}, over the limit of {settings.max_seq_len} "
            f"(ATTNVIZ_MAX_SEQ_LEN); ask for at most {max(0, room)} new tokens",
        )
    if model.max_tokens is not None and lengths.total > model.max_tokens:
        raise AttentionInputError(
            "max_new_tokens",
            f"the prompt has {lengths.source} tokens and {model.name} takes at most "
            f"{model.max_tokens} (max_position_embeddings); ask for at most "
            f"{max(0, model.max_tokens - lengths.source)} new tokens",
        )


def batch_payload(
    model: PretrainedModel,
    request: PretrainedAttentionRequest,
    result: PretrainedAttentions,
    block: str,
) -> dict[str, Any]:
    """The response for the whole batch: every map of the block at full resolution, padded."""
    maps = batch_maps(result, block)  # type: ignore[arg-type]
    queries, keys = result.queries(block), result.keys(block)  # type: ignore[arg-type]
    enc = request.encoding
    return {
        **model_fields(model, result, block),
        "shape": list(maps.attentions.shape),
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
            if maps.rollout is None or request.method != "rollout"
            else encode_large(maps.rollout, enc)
        ),
    }


def sequence_fields(
    model: PretrainedModel, request: PretrainedAttentionRequest, prepared: PreparedSequence
) -> dict[str, Any]:
    """The one-input fields known before any layer's maps: tokens, generation, rows."""
    walk, enc = prepared.walk, request.encoding
    tokens, ids, types, special = walk.shown(walk.queries, walk.keep_q)
    key_tokens = walk.shown(walk.keys, walk.keep_k)[0]
    factor, key_factor = walk.factors(len(tokens), len(key_tokens))
    return {
        **model_fields(model, prepared.result, walk.block),
        "tokens": [tokens],
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
        "ablation": prepared.ablation,
        "head_importance": (
            None
            if prepared.gradients is None or request.method != "head_importance"
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
        "next_tokens": next_tokens(model, prepared.result, request.top_k, walk.keep_q),
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
    view: SequenceView,
) -> dict[str, Any]:
    """The response for one input (sequence_index), with its display options applied."""
    enc = request.encoding
    attentions = view.attentions[:, None]  # (N', 1, H', P_q, P_k)
    length, key_length = len(view.tokens), len(view.key_tokens)
    return {
        **sequence_fields(model, request, prepared),
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
    if request.method != "rollout" or view.rollout is None:
        return {}
    return {"method_map": encode_large(view.rollout[None], request.encoding)}


def downsample(pooling: Pooling, length: int, key_length: int) -> dict[str, Any] | None:
    """The ``downsample`` object of a pooling, or None when nothing was pooled."""
    if not pooling.pooled:
        return None
    return {
        "method": "max",
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
    result: PretrainedAttentions,
    top_k: int,
    keep: torch.Tensor | None,
) -> list[list[dict[str, Any]]] | None:
    """The top_k next tokens at each shown position (hidden special tokens left out)."""
    if not top_k or result.next_tokens is None:
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


def model_fields(
    model: PretrainedModel, result: PretrainedAttentions, block: str
) -> dict[str, Any]:
    """The fields every response has: the model, the block, where and how long it ran."""
    return {
        "model": model.name,
        "family": model.family,
        "architecture": model.architecture,
        "block": block,
        "num_layers": result.num_layers(block),  # type: ignore[arg-type]
        "num_heads": model.num_heads,
        "num_key_value_heads": model.num_key_value_heads,
        "d_model": model.d_model,
        "device": result.device,
        "compute_ms": result.compute_ms,
    }
