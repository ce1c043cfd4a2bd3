"""Pretrained models: GET /api/v1/models and POST /api/v1/models/attention (and /layers...).

POST /api/v1/models/attention, /attention/layers (streamed), /attention/download,
/attention/tiles and /attention/upload (a vision-language prompt's images as files).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import time
from collections.abc import Callable, Generator, Iterator
from typing import Annotated, Any

import torch
from fastapi import APIRouter, File, Form, HTTPException, UploadFile, status
from fastapi.responses import Response, StreamingResponse
from pydantic import ValidationError

from ...attention.cancellation import ComputeCancelledError
from ...attention.errors import AttentionInputError
from ...pretrained import ModelRegistry, PretrainedModel
from ...pretrained.analysis import needs_states
from ...pretrained.loading import PRETRAINED_EXTRA
from ...pretrained.methods import method_spec, with_method
from ...pretrained.recordings import RecordingCache
from ...pretrained.streaming import ProgressBudget
from ...pretrained.tiles import TileError
from ...pretrained.zoom import zoom_span
from ..checks import check_cells, check_limit
from ..dependencies import RecordingsDep, RegistryDep, SettingsDep, ready_model
from ..errors import ERROR_RESPONSES, engine_errors, field_error, out_of_memory
from ..executor import computed, held_while_sent
from ..limits import LONG_WORK_TOKENS
from ..memory import release_memory
from ..payloads.files import maps_file
from ..payloads.pretrained import (
    batch_payload,
    downsample,
    model_info,
    ndjson,
    next_tokens,
    rollout_method_map,
    sequence_fields,
    sequence_payload,
)
from ..pretrained_inputs import prepared_sequence, tokenized
from ..schemas.models import ModelListResponse
from ..schemas.pretrained import (
    PretrainedAttentionRequest,
    PretrainedAttentionResponse,
    PretrainedDownloadRequest,
    PretrainedLayersRequest,
)
from ..schemas.tiles import PretrainedTilesRequest, PretrainedTilesResponse
from ..settings import Settings
from ..transport import encode_floats, respond

router = APIRouter(prefix="/api/v1/models", tags=["pretrained models"])


INSTALL_HINT = f"No pretrained model is installed: {PRETRAINED_EXTRA}."


@router.get("", response_model=ModelListResponse, summary="The pretrained models on offer")
def list_models(registry: RegistryDep) -> ModelListResponse:
    """ATTNVIZ_MODELS (under their Hugging Face ids), the packaged models, ATTNVIZ_MODEL_DIRS.

    Models load in the background after start-up; each says whether it is loading,
    ready, or failed (with the reason).
    """
    entries = registry.entries()
    return ModelListResponse(
        default=entries[0].name if entries else None,
        models=[model_info(e) for e in entries],
        loading=any(e.state == "loading" for e in entries),
        install_hint=None if entries else INSTALL_HINT,
    )


@router.post(
    "/attention",
    response_model=PretrainedAttentionResponse,
    responses=ERROR_RESPONSES,
    summary="Attention of every layer and head of a pretrained model on real text",
)
async def compute_model_attention(
    request: PretrainedAttentionRequest,
    settings: SettingsDep,
    registry: RegistryDep,
    recordings: RecordingsDep,
) -> Response:
    """Tokenise the texts with the model's own tokenizer and run it, recording attention.

    For the whole batch: every layer's and head's attention (N, B, H, L_q, L_k) of the
    chosen block, the head mean per layer, the mean over all layers and heads, and
    attention rollout. With ``sequence_index``, one input run alone, with the display
    options (hidden special tokens, one layer or head, pooling, a query's rows, a
    decoder's generation and next-token candidates).
    """
    return await answered(model_response, request, settings, registry, recordings)


def model_response(
    model: PretrainedModel,
    request: PretrainedAttentionRequest,
    settings: Settings,
    recordings: RecordingCache,
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
    prepared = prepared_sequence(model, request, batch, targets, block, settings, recordings)
    with engine_errors(request.device):
        summary = prepared.walk.summary()
    payload = sequence_payload(model, request, prepared, summary)
    result = summary.result
    payload["pass_key"] = recordings.pass_key(
        model, result.batch, result.targets, device=request.device
    )
    return respond(payload)


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
    request: PretrainedLayersRequest,
    settings: SettingsDep,
    registry: RegistryDep,
    recordings: RecordingsDep,
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
    return await answered(stream_response, request, settings, registry, recordings)


@router.post(
    "/attention/download",
    responses={
        **ERROR_RESPONSES,
        200: {
            "description": "The file: .npy (float32, (L_q, L_k) for a head, (H, L_q, L_k) for "
            "a layer) or .safetensors (the same tensor, the tokens in its metadata).",
            "content": {"application/octet-stream": {}},
        },
    },
    response_class=StreamingResponse,
    summary="One input's exact, unpooled maps of a layer or head, as .npy or safetensors",
)
async def download_model_attention(
    request: PretrainedDownloadRequest,
    settings: SettingsDep,
    registry: RegistryDep,
    recordings: RecordingsDep,
) -> Response:
    """The maps of ``layer_index`` (one head with ``head_index``) of one input, as a file.

    The input runs alone (``sequence_index``, default 0) with the options of POST
    /attention (chat, generation, heads off, hidden special tokens, merged words, a
    per-head method); the maps are never pooled: the numbers behind the page's pictures.
    Its pass is reused when kept (the page's grid ran it). A file over
    ATTNVIZ_MAX_DOWNLOAD_BYTES is refused before anything runs: 413 naming layer_index
    for a layer (download its heads one at a time), texts for one head.
    """
    return await answered(download_response, request, settings, registry, recordings)


@router.post(
    "/attention/tiles",
    response_model=PretrainedTilesResponse,
    responses={
        **ERROR_RESPONSES,
        410: {
            "description": "The pass is no longer kept (evicted, or from before a restart); "
            "`detail[].loc` names pass_key: ask for the grid again."
        },
    },
    summary="One zoom tile (z, x, y) of one head's map, exact, from a kept pass",
)
async def read_attention_tile(
    request: PretrainedTilesRequest, settings: SettingsDep, recordings: RecordingsDep
) -> Response:
    """Exact weights of one head over a tile of its map, pooled to at most 256 x 256 cells.

    The pass is one a one-input response kept for tiles (its ``pass_key``): the weights
    are recomputed from its q, k and each row's log-sum-exp (exp(score - lse)), so no
    forward pass runs, at any length. Level z = 0 is the whole map in one tile; each level
    halves the tokens per cell, and at ``max_z`` a cell is one token, whose tokens come
    with the tile (``query_tokens``, ``key_tokens``), as HiGlass serves a matrix.
    """
    return await computed(
        "pass_key", "a tile of a shorter input", settings, tile_response, request, recordings
    )


def tile_response(request: PretrainedTilesRequest, recordings: RecordingCache) -> Response:
    """The blocking part of :func:`read_attention_tile`.

    Raises:
        HTTPException: 410 naming pass_key (not kept); 422 naming block, layer_index,
            head_index, z, x or y (not in the pass's map).
    """
    started = time.perf_counter()
    found = recordings.by_pass_key(request.pass_key)
    if found is None or found[1].kept is None:
        raise field_error(
            status.HTTP_410_GONE,
            "pass_key",
            f"{request.pass_key} is not a pass kept here (evicted from the recording cache, "
            "ATTNVIZ_RECORDING_CACHE_BYTES, or from before a restart); ask for the grid again",
        )
    name, result = found
    unprocessable = status.HTTP_422_UNPROCESSABLE_CONTENT
    block = request.block or result.first_block
    if block not in result.block_calls:
        raise field_error(
            unprocessable, "block", f"{block!r}: the pass has {', '.join(result.block_calls)}"
        )
    layers = result.num_layers(block)
    if request.layer_index >= layers:
        raise field_error(
            unprocessable, "layer_index", f"{request.layer_index} is not below {layers}"
        )
    heads = result.num_heads(block, request.layer_index)
    if request.head_index >= heads:
        raise field_error(unprocessable, "head_index", f"{request.head_index} is not below {heads}")
    queries, keys = result.queries(block), result.keys(block)
    length_q, length_k = int(queries.input_ids.shape[1]), int(keys.input_ids.shape[1])
    try:
        span = zoom_span(length_q, length_k, request.z, request.x, request.y)
    except IndexError as error:
        raise field_error(unprocessable, str(error).split()[0], str(error)) from error
    try:
        with engine_errors(result.device):  # out of device memory: a 503
            weights = result.tile(
                block,
                request.layer_index,
                heads=[request.head_index],
                rows=span.rows,
                cols=span.cols,
                reduce=request.reduce,
                factor=(span.factor, span.factor),
            )[0, 0]
    except TileError as error:  # never kept with a refusal; said by name all the same
        raise field_error(unprocessable, "layer_index", str(error)) from error
    whole = span.factor == 1
    return respond(
        {
            "pass_key": request.pass_key,
            "model": name,
            "block": block,
            "layer_index": request.layer_index,
            "head_index": request.head_index,
            "z": request.z,
            "x": request.x,
            "y": request.y,
            "max_z": span.max_z,
            "factor": span.factor,
            "reduce": request.reduce,
            "query_length": length_q,
            "key_length": length_k,
            "rows": [span.rows.start, span.rows.stop],
            "cols": [span.cols.start, span.cols.stop],
            "weights": encode_floats(weights, request.encoding),
            "query_tokens": queries.tokens[0][span.rows.start : span.rows.stop] if whole else None,
            "key_tokens": keys.tokens[0][span.cols.start : span.cols.stop] if whole else None,
            "compute_ms": (time.perf_counter() - started) * 1000.0,
        }
    )


def download_response(
    model: PretrainedModel,
    request: PretrainedDownloadRequest,
    settings: Settings,
    recordings: RecordingCache,
) -> Response:
    """The blocking part of :func:`download_model_attention`: tokenise, then the file."""
    batch, targets, block = tokenized(model, request, settings)
    return maps_file(model, request, batch, targets, block, settings, recordings)


async def answered(
    respond_with: Callable[[PretrainedModel, Any, Settings, RecordingCache], Response],
    request: PretrainedAttentionRequest,
    settings: Settings,
    registry: ModelRegistry,
    recordings: RecordingCache,
) -> Response:
    """Admit a request (model ready, batch and tokens within bounds), then compute it.

    Whether it is long work (:func:`long_share`) is decided first, off the event loop (a
    thread of its own, not a compute worker: the texts are tokenised, milliseconds with
    the fast tokenizers, and again by ``respond_with``). The response is computed on the
    pool within the time budget, holding a large-request slot while it is sent, and long
    work a long computation's slot too.

    Raises:
        HTTPException: 422 or 413 naming the field (:func:`tokenized`); 503 with
            Retry-After, type "busy", naming texts, for long work while the long
            computations' share is full and as many wait (:func:`..executor.long_slot`).
    """
    model = ready_model(registry, request.model)
    assert isinstance(model, PretrainedModel)  # a text model: ready_model required it
    check_limit("texts", len(request.texts), settings.max_batch_size, "MAX_BATCH_SIZE")
    b = request.sequence_index
    if b is not None and b >= len(request.texts):
        raise field_error(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            "sequence_index",
            f"{b} is not below {len(request.texts)}",
        )
    share = await asyncio.to_thread(long_share, model, request, settings, recordings)
    return await held_while_sent(
        computed(
            "texts",
            "fewer or shorter texts",
            settings,
            respond_with,
            model,
            request,
            settings,
            recordings,
        ),
        long=share,
    )


def long_share(
    model: PretrainedModel,
    request: PretrainedAttentionRequest,
    settings: Settings,
    recordings: RecordingCache,
) -> tuple[str, str] | None:
    """Whether a request is long work, run in the long computations' share of the pool.

    Long (:func:`..executor.long_slot`, as :func:`..executor.held_while_sent` takes it):

    * a gradient method (a backward pass per input) or value zeroing (a pass per layer
      with each token's value zeroed), for one input (``sequence_index``; a whole batch
      asking for one of these one-input methods is refused with 422, and is not long);
    * a forward pass over more than :data:`..limits.LONG_WORK_TOKENS` tokens: one
      input's prompt + ``max_new_tokens`` (+ its targets), a whole batch's B x L padded
      tokens (+ its targets'), unless the one input's pass is kept in ``recordings``
      already (a click on one head after the grid reuses the grid's pass: no pass runs).
      A pass after a generation (``max_new_tokens``) or with heads switched off
      (``ablate``) is counted as one to run: it is kept by the generated tokens, not
      known before the generation, or by the heads off, beside the intact one.

    Args:
        model: the request's model.
        request: the request, its checks passed (sequence_index below the batch size).
        settings: the bounds its texts are checked against (:func:`tokenized`).
        recordings: the kept passes (read, nothing run).

    Returns:
        ("texts", what the 503 calls the work), or None for short work.

    Raises:
        HTTPException: as :func:`tokenized` (422, 413), before any slot is taken.
    """
    b = request.sequence_index
    if b is not None and method_spec(request.method).long_work:
        return ("texts", f"the {request.method} maps")
    batch, targets, _ = tokenized(model, request, settings)
    if b is None:
        count = batch.input_ids.numel() + (0 if targets is None else targets.input_ids.numel())
        return ("texts", "a long batch's maps") if count > LONG_WORK_TOKENS else None
    alone = batch.select(b)
    alone_targets = None if targets is None else targets.select(b)
    count = alone.input_ids.shape[1] + request.max_new_tokens
    if alone_targets is not None:
        count += alone_targets.input_ids.shape[1]
    if count <= LONG_WORK_TOKENS:
        return None
    if not request.max_new_tokens and not request.ablate:
        states = needs_states(request.view_options())  # a pass kept for tiles serves none
        kept = recordings.kept(model, alone, alone_targets, device=request.device, states=states)
        if kept is not None:
            return None
    return ("texts", "a long input's maps")


def stream_response(
    model: PretrainedModel,
    request: PretrainedAttentionRequest,
    settings: Settings,
    recordings: RecordingCache,
) -> StreamingResponse:
    """The blocking part of :func:`stream_model_attention`: run, then stream each layer."""
    started = time.perf_counter()
    # The time budget covers the stream too, as the longest wait for its next layer: a
    # walk (and an observed pass) making no layer for that long stops, and the stream ends
    # with an error line saying so; one whose layers keep coming runs to its end.
    budget = settings.compute_timeout_s
    deadline = ProgressBudget(
        budget,
        f"the computation made no new layer for {budget:g} s (ATTNVIZ_COMPUTE_TIMEOUT_S) and "
        "was stopped; try fewer or shorter texts",
    )
    batch, targets, block = tokenized(model, request, settings)
    prepared = prepared_sequence(
        model, request, batch, targets, block, settings, recordings, deadline=deadline
    )
    enc = request.encoding
    walk = prepared.walk

    def lines() -> Generator[bytes, None, None]:
        nonlocal prepared, walk
        try:
            yield from stream_lines()
        finally:  # sent, failed, cut or abandoned: the walk's maps and pass go before the trim
            prepared = walk = None  # type: ignore[assignment]
            release_memory()

    def stream_lines() -> Iterator[bytes]:
        yield ndjson(
            {"type": "start", **sequence_fields(model, request, prepared, prepared.result)}
        )
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
            summary = walk.summary()
        except torch.OutOfMemoryError:
            yield ndjson({"type": "error", "detail": out_of_memory(request.device)})
            return
        except (AttentionInputError, ComputeCancelledError, RuntimeError, ValueError) as error:
            if deadline.stopped is None:  # a client gone reads nothing: the stream just ends
                yield ndjson({"type": "error", "detail": str(error)})
            return
        # An observed pass ran while the layers were sent: its time and next tokens
        # come last (the start line has compute_ms 0 and next_tokens null).
        view, result = summary.view, summary.result
        late = (
            {
                "compute_ms": result.compute_ms,
                "next_tokens": next_tokens(model, result, request.top_k, walk.keep_q),
            }
            if prepared.result is None
            else {}
        )
        yield ndjson(
            {
                "type": "end",
                **late,
                "pass_key": recordings.pass_key(
                    model, result.batch, result.targets, device=request.device
                ),
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

    stream = lines()

    def close_work() -> None:
        """Close the stream: its walk and pass are dropped now, not when collected."""
        with contextlib.suppress(ValueError):  # running in a sender's thread: it ends itself
            stream.close()

    response = StreamingResponse(stream, media_type="application/x-ndjson")
    # its sender stops the walk (and an observed pass) when the stream ends unsent: the
    # pass's thread stops at its next chunk instead of running to its end, and the stream
    # is closed before the memory is trimmed (executor.held_while_sent)
    response.stop_work = functools.partial(deadline.stop, "the stream's client went away")  # type: ignore[attr-defined]
    response.close_work = close_work  # type: ignore[attr-defined]
    return response


@router.post(
    "/attention/upload",
    response_model=PretrainedAttentionResponse,
    responses=ERROR_RESPONSES,
    summary="POST /api/v1/models/attention with a vision-language prompt's images as files",
)
async def upload_model_attention(
    settings: SettingsDep,
    registry: RegistryDep,
    recordings: RecordingsDep,
    request: Annotated[
        str,
        Form(
            min_length=2,
            description="The JSON body of POST /api/v1/models/attention, without `images`: "
            "the files are its images, in order.",
        ),
    ],
    images: Annotated[
        list[UploadFile],
        File(description="The prompt's images: PNG, JPEG, WebP, GIF or BMP (else a 415)."),
    ] = [],  # noqa: B006  (FastAPI copies a default; none: a prompt without images)
) -> Response:
    """A vision-language prompt with its images as multipart files, not base64 in JSON.

    Up to ATTNVIZ_MAX_UPLOAD_BYTES in all (32 MiB; the JSON route's body is bounded by
    ATTNVIZ_MAX_BODY_BYTES, 4 MiB). The answer is POST /api/v1/models/attention's, and
    so are its checks of each image.

    Raises:
        HTTPException: 422 naming ``request``: not JSON, not an object, or with
            ``images``; or naming one of its fields (``request.texts``), as the JSON route
            refuses it.
    """
    try:
        fields = json.loads(request)
    except json.JSONDecodeError as error:
        raise field_error(422, "request", f"not JSON: {error}") from error
    if not isinstance(fields, dict):
        raise field_error(422, "request", "the attention request's JSON object")
    if "images" in fields:
        raise field_error(422, "request", "the images go as the files, not in the JSON")
    encoded = [base64.b64encode(await image.read()).decode() for image in images]
    try:
        parsed = PretrainedAttentionRequest.model_validate({**fields, "images": encoded})
    except ValidationError as error:
        # The request's own fields, inside the form's `request` (the schema can only say
        # it is a string: each refusal is a condition on its JSON, a value_error).
        detail = [
            {"loc": ["body", "request", *e["loc"]], "msg": e["msg"], "type": "value_error"}
            for e in error.errors(include_url=False)
        ]
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail=detail) from error
    return await answered(model_response, parsed, settings, registry, recordings)
