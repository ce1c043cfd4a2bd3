"""Speech and images: POST /api/v1/speech (Whisper) and POST /api/v1/vision (ViT, DeiT, DINOv2).

Both take a multipart form: the file (``audio`` or ``image``, up to
ATTNVIZ_MAX_UPLOAD_BYTES) and a few fields. Decoding is done by well-kept libraries
(PyAV for audio, Pillow for images); an upload they cannot read is a 422 naming the
file's field, never a 500.
"""

from __future__ import annotations

import hashlib
import math
import threading
from typing import Annotated, Any, Final, Literal

import torch
from cachetools import LRUCache
from fastapi import APIRouter, File, Form, UploadFile
from fastapi.responses import Response

from ...attention.errors import AttentionInputError
from ...attention.pooling import block_reduce
from ...pretrained.speech import FRAME_S, SAMPLE_RATE, SpeechModel, decode_audio, waveform_envelope
from ...pretrained.vision import ImageAttention, ImageModel, decode_image
from ..checks import check_cells
from ..dependencies import RegistryDep, SettingsDep, ready_model
from ..errors import ERROR_RESPONSES, engine_errors
from ..executor import computed, held_while_sent
from ..limits import MAX_MODEL_NAME_CHARS
from ..schemas.media import SpeechResponse, VisionResponse
from ..settings import Settings
from ..transport import Encoding, encode_floats, respond

router = APIRouter(prefix="/api/v1", tags=["speech and images"])

MAX_ENCODER_CELLS: Final = 300
"""The encoder's frame maps are pooled to at most this many rows and columns."""
IMAGE_CACHE_SIZE: Final = 8
"""Images kept after their pass (by model and file hash), so a click on a patch reruns nothing."""
_images: LRUCache[tuple[str, str, str], ImageAttention] = LRUCache(IMAGE_CACHE_SIZE)
_images_lock = threading.Lock()

ModelField = Annotated[
    str | None,
    Form(
        max_length=MAX_MODEL_NAME_CHARS,
        description="The model's name (GET /api/v1/models); default the first of its kind.",
    ),
]
DeviceField = Annotated[Literal["auto", "cpu", "cuda"], Form(description="Where it runs.")]
EncodingField = Annotated[
    Encoding, Form(description="How arrays are written: JSON numbers or base64 typed arrays.")
]


def pool_frames(weights: torch.Tensor, k: int) -> torch.Tensor:
    """Pool (..., F, F) frame maps by ``k`` frames per cell: (..., ceil(F/k), ceil(F/k)).

    Queries are averaged and keys summed, so each row still holds the same total weight
    (the page's text views pool by block maximum instead, :mod:`attnviz.pretrained.display`;
    here a cell of 3 frames is 60 ms of audio, whose weights add up). Same dtype as given.
    """
    return block_reduce(weights, k, k, rows="mean", columns="sum")


@router.post(
    "/speech",
    response_model=SpeechResponse,
    responses=ERROR_RESPONSES,
    summary="Transcribe an audio clip with Whisper and return its attention over time",
)
async def transcribe_speech(
    settings: SettingsDep,
    registry: RegistryDep,
    audio: Annotated[
        UploadFile,
        File(
            description="Up to 30 s of audio in any format FFmpeg reads (WAV, FLAC, MP3, "
            "Ogg/Opus, WebM from a browser's microphone)."
        ),
    ],
    model: ModelField = None,
    device: DeviceField = "auto",
    encoding: EncodingField = "base64_float32",
) -> Response:
    """Decode the audio (16 kHz mono), transcribe it greedily and record every block.

    The response has the transcript and, for each layer and head: the encoder's
    self-attention over the audio's frames (20 ms each), the decoder's over its
    tokens, and the cross attention of each decoder position over the frames (row i
    produced ``next_tokens[i]``), with the config's alignment heads named.
    """
    speech = ready_model(registry, model, "speech")
    assert isinstance(speech, SpeechModel)
    data = await audio.read()
    return await held_while_sent(
        computed(
            "audio",
            "a shorter clip",
            settings,
            speech_response,
            speech,
            data,
            device,
            encoding,
            settings,
        )
    )


def speech_response(
    model: SpeechModel, data: bytes, device: str, encoding: str, settings: Settings
) -> Response:
    """The blocking part of :func:`transcribe_speech`.

    Raises:
        HTTPException: 422 naming ``audio`` (not decodable, empty, over 30 s) or
            ``device``.
    """
    with engine_errors(device):
        samples = decode_audio(data)
        result = model.transcribe(samples, device=device)
        per_cell = max(1, math.ceil(result.num_frames / MAX_ENCODER_CELLS))
        t, f, cells = (
            len(result.decoder_ids),
            result.num_frames,
            math.ceil(result.num_frames / per_cell),
        )
        counts = {
            block: len(calls) * model.block_heads(block)
            for block, calls in result.block_calls.items()
        }
        check_cells(
            counts["encoder"] * cells**2 + counts["decoder"] * t * t + counts["cross"] * t * f,
            settings.max_weight_cells,
            "audio",
            "a shorter clip, or raise ATTNVIZ_MAX_WEIGHT_CELLS",
        )
        encoder = result.block("encoder", lambda heads: pool_frames(heads, per_cell))
        blocks = {
            "encoder": {"weights": encode_floats(encoder, encoding), "frames_per_cell": per_cell},
            "decoder": {"weights": encode_floats(result.block("decoder"), encoding)},
            "cross": {"weights": encode_floats(result.block("cross"), encoding)},
        }
    decode = model.tokenizer.decode
    return respond(
        {
            "model": model.name,
            "text": result.text,
            "duration_s": result.duration_s,
            "sample_rate": SAMPLE_RATE,
            "frame_s": FRAME_S,
            "num_frames": result.num_frames,
            "decoder_tokens": [decode([i]) for i in result.decoder_ids],
            "decoder_ids": result.decoder_ids,
            "next_tokens": [decode([i]) for i in result.next_ids],
            "first_text_row": result.prompt_length - 1,
            "alignment_heads": [list(pair) for pair in model.alignment_heads],
            "waveform": waveform_envelope(result.samples),
            "blocks": blocks,
            "transcribe_ms": result.transcribe_ms,
            "compute_ms": result.compute_ms,
            "device": result.device,
        }
    )


@router.post(
    "/vision",
    response_model=VisionResponse,
    responses=ERROR_RESPONSES,
    summary="One token's attention over an image's patches in every layer and head",
)
async def image_attention(
    settings: SettingsDep,
    registry: RegistryDep,
    image: Annotated[
        UploadFile,
        File(description="A PNG, JPEG, WebP, GIF or BMP image (any other format is a 415)."),
    ],
    model: ModelField = None,
    query: Annotated[
        int,
        Form(
            ge=0,
            description="The token whose attention is given: 0 is [CLS]; patch "
            "(r, c) is P + r * cols + c.",
        ),
    ] = 0,
    device: DeviceField = "auto",
    encoding: EncodingField = "base64_float32",
) -> Response:
    """Run the image through the model's own processor and model, recording attention.

    Returns the processed image, the patch grid, and the query token's row of
    attention in every layer and head with its attention-rollout row after each layer.
    The same image again (say, another query) reuses the pass.
    """
    vision = ready_model(registry, model, "image")
    assert isinstance(vision, ImageModel)
    data = await image.read()
    return await held_while_sent(
        computed(
            "image",
            "a smaller model",
            settings,
            vision_response,
            vision,
            data,
            query,
            device,
            encoding,
            settings,
        )
    )


def analysed(model: ImageModel, data: bytes, device: str, query: int) -> ImageAttention:
    """The recorded pass of this image, from the cache or run now.

    ``query`` is checked against the image's tokens before the pass runs (the processed
    image's size gives them).

    Raises:
        AttentionInputError: (field ``query``) beyond the tokens; as :func:`decode_image`.
    """
    key = (model.name, device, hashlib.sha256(data).hexdigest())
    with _images_lock:
        found = _images.get(key)
    if found is not None:
        check_query(query, found.num_tokens)
        return found
    image = decode_image(data)
    pixels = model.pixels(image)
    check_query(query, model.num_tokens(pixels))
    result = model.analyse(image, device=device, pixels=pixels)
    with _images_lock:
        _images[key] = result
    return result


def check_query(query: int, num_tokens: int) -> None:
    """Refuse a query beyond the image's tokens (422 naming ``query``)."""
    if query >= num_tokens:
        raise AttentionInputError(
            "query",
            f"{query} is beyond the image's {num_tokens} tokens (0 to {num_tokens - 1})",
        )


def vision_response(
    model: ImageModel, data: bytes, query: int, device: str, encoding: str, settings: Settings
) -> Response:
    """The blocking part of :func:`image_attention`.

    Raises:
        HTTPException: 422 naming ``image`` (not an image, too large), ``query``
            (beyond the tokens) or ``device``.
    """
    with engine_errors(device):
        result = analysed(model, data, device, query)
        weights = result.query_rows(query)
        rollout = result.rollout_rows(query)
    rows, cols = result.grid
    prefix = len(result.prefix)
    name = (
        result.prefix[query]
        if query < prefix
        else "patch (row {}, column {})".format(*divmod(query - prefix, cols))
    )
    payload: dict[str, Any] = {
        "model": model.name,
        "architecture": model.architecture,
        "image": result.picture,
        "width": int(result.pixel_values.shape[-1]),
        "height": int(result.pixel_values.shape[-2]),
        "patch_size": model.patch_size,
        "grid": [rows, cols],
        "prefix": result.prefix,
        "num_tokens": result.num_tokens,
        "num_layers": result.num_layers,
        "num_heads": int(weights.shape[1]),
        "query": query,
        "query_name": name,
        "weights": encode_floats(weights, encoding),
        "rollout": encode_floats(rollout, encoding),
        "labels": [{"label": label, "probability": p} for label, p in result.labels],
        "compute_ms": result.compute_ms,
        "device": result.device,
    }
    return respond(payload)
