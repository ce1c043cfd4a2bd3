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
import re
from collections.abc import Iterator
from typing import Final

import numpy as np
import torch
from fastapi import status
from fastapi.responses import Response, StreamingResponse

from ...pretrained import PretrainedModel
from ...pretrained.admission import InputLengths
from ...pretrained.analysis import Limits, prepare_sequence
from ...pretrained.blocks import Block
from ...pretrained.methods import method_spec
from ...pretrained.recordings import RecordingCache
from ...pretrained.tokens import TokenizedBatch
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
        # The file's own bound was checked above; the walk's averages are not sent.
        max_weight_cells=size // 4 + 4 * 2**20,
        max_request_bytes=settings.max_request_bytes,
    )
    with engine_errors(request.device):
        prepared = prepare_sequence(
            model, request.view_options(), batch, targets, block, limits, recordings, observe=True
        )
        walk = prepared.walk
        (maps,) = list(walk.layers())
    array = host_floats(maps.attentions)  # (H', L_q, L_k): the walk's float32, no copy
    if request.head_index is not None:
        array = array[0]
    spec = method_spec(walk.method)
    name = spec.name if spec.per_head else "attn_weights"
    parts = [model.name, f"input{b}", f"layer{request.layer_index}"]
    if request.head_index is not None:
        parts.append(f"head{request.head_index}")
    if spec.per_head:  # the maps hold the method's quantity, not the weights
        parts.append(spec.name)
    filename = _UNSAFE.sub("_", "-".join(parts)) + f".{request.format}"
    if request.format == "npy":
        header, chunks = npy_parts(array)
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
        header, chunks = safetensors_parts(name, array, metadata)
    length = len(header) + array.nbytes
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


def _rows(array: np.ndarray) -> Iterator[bytes]:
    """A C-contiguous array's bytes (little-endian), one head (or 64 rows) at a time."""
    little = array.astype(array.dtype.newbyteorder("<"), copy=False)
    step = 1 if little.ndim == 3 else 64
    for start in range(0, len(little), step):
        yield np.ascontiguousarray(little[start : start + step]).tobytes()


def npy_parts(array: np.ndarray) -> tuple[bytes, Iterator[bytes]]:
    """NumPy's .npy of ``array``: its header (``numpy.lib.format``) and its data, in chunks.

    The data is sent a head at a time, so a layer of 8,192 tokens is never copied whole.
    """
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header,
        {
            "descr": np.lib.format.dtype_to_descr(array.dtype.newbyteorder("<")),
            "fortran_order": False,
            "shape": array.shape,
        },
    )
    return header.getvalue(), _rows(array)


def safetensors_parts(
    name: str, array: np.ndarray, metadata: dict[str, str]
) -> tuple[bytes, Iterator[bytes]]:
    """A safetensors file of one tensor: the header safetensors writes, then the data.

    The header comes from ``safetensors.torch.save`` of an empty tensor of the same
    dtype, its shape and offsets then set to the array's (the format: an 8-byte
    little-endian header length, the JSON header, the data), so the file is the
    library's own layout while the data is sent a head at a time.
    """
    from safetensors.torch import save

    dtype = torch.float64 if array.dtype == np.float64 else torch.float32
    empty = save({name: torch.zeros(0, dtype=dtype)}, metadata=metadata)
    size = int.from_bytes(empty[:8], "little")
    described = json.loads(empty[8 : 8 + size])
    described[name]["shape"] = list(array.shape)
    described[name]["data_offsets"] = [0, array.nbytes]
    text = json.dumps(described, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # safetensors aligns the data to 8 bytes
    header = len(text).to_bytes(8, "little") + text
    return header, _rows(array)
