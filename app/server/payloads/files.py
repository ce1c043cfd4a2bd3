"""The files of POST /api/v1/models/attention/download: a layer's or head's exact maps.

The page's maps of a long input are block-max pooled to the screen; the numbers behind
them, unpooled, come from here as NumPy's ``.npy`` or as safetensors, for one input (run
alone, as every one-input view is) and one layer or one head. The same options as POST
/api/v1/models/attention (chat, generation, heads off, hidden special tokens, merged
words, a per-head method), so the file holds what the page draws, at full resolution.
"""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Iterator
from typing import Final

import numpy as np
import torch
from fastapi import status
from fastapi.responses import Response, StreamingResponse

from ...pretrained import PretrainedModel
from ...pretrained.analysis import Limits
from ...pretrained.blocks import Block
from ...pretrained.lengths import InputLengths
from ...pretrained.methods import method_spec
from ...pretrained.recordings import RecordingCache
from ...pretrained.results import PretrainedAttentions
from ...pretrained.tiles import TileError
from ...pretrained.tokens import TokenizedBatch
from ...pretrained.view_plan import plan_view
from ..errors import engine_errors, field_error
from ..schemas.pretrained import PretrainedDownloadRequest
from ..settings import Settings
from ..transport import host_floats

MEDIA_TYPES: Final = {
    "npy": "application/octet-stream",
    "safetensors": "application/octet-stream",
}
"""The response's media type of each format (neither has a registered one)."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def download_bytes(
    model: PretrainedModel, block: Block, head_index: int | None, lengths: InputLengths
) -> int:
    """The bytes of a file's array at most: heads x L_q x L_k float32, new tokens in.

    One head with ``head_index``, else the block's heads. Hidden special tokens and
    merged words only make it smaller.
    """
    heads = 1 if head_index is not None else model.block_heads(block)
    return heads * lengths.queries(block) * lengths.keys(block) * 4


def maps_file(
    model: PretrainedModel,
    request: PretrainedDownloadRequest,
    batch: TokenizedBatch,
    targets: TokenizedBatch | None,
    block: Block,
    settings: Settings,
    recordings: RecordingCache,
) -> Response:
    """The file of POST /api/v1/models/attention/download, of the tokenised request.

    Checks its size, runs the input (or takes its kept pass) and streams the file: the
    .npy header or the safetensors header, then the maps a head at a time. The file is
    named after the model, input, layer, head and method (Content-Disposition).

    Raises:
        HTTPException: 413 over ATTNVIZ_MAX_DOWNLOAD_BYTES (naming layer_index for a
            layer: download its heads one at a time; texts for one head), before
            anything runs; 422 naming a bad option and 413 over ATTNVIZ_MAX_REQUEST_BYTES,
            as POST /attention.
    """
    b = request.sequence_index
    alone = batch.select(b)
    lengths = InputLengths(
        source=int(alone.input_ids.shape[1]),
        target=None if targets is None else int(targets.select(b).input_ids.shape[1]),
        new_tokens=request.max_new_tokens,
    )
    size = download_bytes(model, block, request.head_index, lengths)
    if size > settings.max_download_bytes:
        field, advice = (
            ("layer_index", "download its heads one at a time (head_index)")
            if request.head_index is None
            else ("texts", "use a shorter text")
        )
        raise field_error(
            status.HTTP_413_CONTENT_TOO_LARGE,
            field,
            f"the file would be {size / 2**20:,.0f} MiB, over the limit of "
            f"{settings.max_download_bytes / 2**20:,.0f} MiB (ATTNVIZ_MAX_DOWNLOAD_BYTES); "
            f"{advice}",
        )
    limits = Limits(
        max_seq_len=settings.max_seq_len,
        # The file's own bound (ATTNVIZ_MAX_DOWNLOAD_BYTES) was checked above: the limit on
        # pooled JSON answers (ATTNVIZ_MAX_WEIGHT_CELLS) is not a file's, and the walk's
        # averages are not sent (a 2,004-token layer was refused by it, with advice the
        # route refuses: "set display_size").
        max_weight_cells=2**62,
        max_request_bytes=settings.max_request_bytes,
    )
    options = request.view_options()
    # The weights as they are (no per-head method, hiding, merging, heads off or
    # generation): rows of tiles of the input's kept pass, streamed; else the walk's maps,
    # held whole.
    plain = not method_spec(options.method).per_head and not (
        options.hide_special_tokens or options.merge_words or options.ablate
    )
    plain = plain and not options.max_new_tokens
    with engine_errors(request.device):
        prepared = plan_view(
            model, options, batch, targets, block, limits, recordings, observe=not plain,
            tiles=plain,
        ).run()  # fmt: skip
        walk = prepared.walk
        tiled = _tiled(walk.result, block, request.layer_index) if plain else None
        if tiled is None:
            (maps,) = list(walk.layers())
            array = host_floats(maps.attentions)  # (H', L_q, L_k): the walk's float32, no copy
            if request.head_index is not None:
                array = array[0]
            shape, chunks = array.shape, _rows(array)
        else:
            heads = model.block_heads(block) if request.head_index is None else 1
            length_q, length_k = walk.length_q, walk.length_k
            shape = (
                (heads, length_q, length_k) if request.head_index is None else (length_q, length_k)
            )
            chunks = _tile_rows(tiled, block, request.layer_index, request.head_index, shape)
    spec = method_spec(walk.method)
    name = spec.name if spec.per_head else "attn_weights"
    parts = [model.name, f"input{b}", f"layer{request.layer_index}"]
    if request.head_index is not None:
        parts.append(f"head{request.head_index}")
    if spec.per_head:  # the maps hold the method's quantity, not the weights
        parts.append(spec.name)
    filename = _UNSAFE.sub("_", "-".join(parts)) + f".{request.format}"
    if request.format == "npy":
        header = npy_header(shape)
    else:
        metadata = {
            "model": model.name,
            "block": block,
            "sequence_index": str(b),
            "layer_index": str(request.layer_index),
            "head_index": "" if request.head_index is None else str(request.head_index),
            "method": walk.method,
            "shape": "(L_q, L_k)" if request.head_index is not None else "(H, L_q, L_k)",
            "query_tokens": json.dumps(walk.shown(walk.queries, walk.keep_q)[0]),
            "key_tokens": json.dumps(walk.shown(walk.keys, walk.keep_k)[0]),
        }
        header = safetensors_header(name, shape, metadata)
    length = len(header) + 4 * math.prod(shape)
    return StreamingResponse(
        _joined(header, chunks),
        media_type=MEDIA_TYPES[request.format],
        headers={
            "Content-Disposition": f'attachment; filename="{filename}"',
            "Content-Length": str(length),
        },
    )


def _joined(header: bytes, chunks: Iterator[bytes]) -> Iterator[bytes]:
    yield header
    yield from chunks


def _tiled(
    result: PretrainedAttentions | None, block: Block, layer: int | None
) -> PretrainedAttentions | None:
    """``result`` when its layer can be read as exact tiles of its kept pass, else None."""
    if result is None or result.kept is None or layer is None:
        return None
    try:
        result.tile(block, layer, heads=[0], rows=range(1), cols=range(1))
    except TileError:
        return None  # a layer tiles do not reproduce: the walk's eager maps
    return result


TILE_ROW_FLOATS: Final = 2**22
"""About how many weights one streamed piece of a tiled file holds (16 MiB of float32)."""


def _tile_rows(
    result: PretrainedAttentions,
    block: Block,
    layer: int | None,
    head: int | None,
    shape: tuple[int, ...],
) -> Iterator[bytes]:
    """The file's float32 data (little-endian), a head and a few rows of tiles at a time.

    Each piece is :meth:`.results.PretrainedAttentions.tile` of those rows over every key
    at factor 1 (exact weights from the kept pass): the file is never held whole.
    """
    assert layer is not None
    length_q, length_k = shape[-2:]
    heads = [head] if head is not None else list(range(shape[0]))
    step = max(1, TILE_ROW_FLOATS // max(1, length_k))
    for h in heads:
        for start in range(0, length_q, step):
            rows = range(start, min(length_q, start + step))
            part = result.tile(block, layer, heads=[h], rows=rows, cols=range(length_k))
            yield part[0, 0].numpy().astype("<f4", copy=False).tobytes()


def _rows(array: np.ndarray) -> Iterator[bytes]:
    """A C-contiguous array's bytes (little-endian), one head (or 64 rows) at a time."""
    little = array.astype("<f4", copy=False)
    step = 1 if little.ndim == 3 else 64
    for start in range(0, len(little), step):
        yield np.ascontiguousarray(little[start : start + step]).tobytes()


def npy_header(shape: tuple[int, ...]) -> bytes:
    """The header of NumPy's .npy (``numpy.lib.format``) of a little-endian float32 array.

    The data follows it in C order (sent a head or a few rows at a time, so a layer of
    8,192 tokens is never copied whole).
    """
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": tuple(shape)}
    )
    return header.getvalue()


def safetensors_header(name: str, shape: tuple[int, ...], metadata: dict[str, str]) -> bytes:
    """The header of a safetensors file of one float32 tensor of ``shape``; the data follows.

    The header comes from ``safetensors.torch.save`` of an empty tensor of the same
    dtype, its shape and offsets then set to the array's (the format: an 8-byte
    little-endian header length, the JSON header, the data), so the file is the
    library's own layout while the data is sent a head (or a few rows) at a time.
    """
    from safetensors.torch import save

    nbytes = 4 * math.prod(shape)
    empty = save({name: torch.zeros(0, dtype=torch.float32)}, metadata=metadata)
    size = int.from_bytes(empty[:8], "little")
    described = json.loads(empty[8 : 8 + size])
    described[name]["shape"] = list(shape)
    described[name]["data_offsets"] = [0, nbytes]
    text = json.dumps(described, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # safetensors aligns the data to 8 bytes
    return len(text).to_bytes(8, "little") + text
