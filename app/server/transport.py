"""Array transport for the JSON API: plain numbers, or base64 typed arrays.

Plain JSON goes through orjson, which writes numpy arrays natively (NaN as null);
nothing walks nested Python lists through ``jsonable_encoder``. The compact
encodings follow Plotly.js's typed-array spec, ``{"dtype", "bdata", "shape"}``:
``bdata`` is the base64 of the array's bytes in C order, little-endian, and
``dtype`` is "f4" (float32), "f2" (float16) or "u1" (uint8, for masks).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from typing import Any, Final, Literal

import numpy as np
import orjson
import torch
from fastapi.responses import Response, StreamingResponse

Encoding = Literal["json", "base64_float32", "base64_float16", "base64_float64"]
_FLOAT_CODES: Final = {
    "base64_float32": ("f4", np.float32),
    "base64_float16": ("f2", np.float16),
    "base64_float64": ("f8", np.float64),
}


def host_floats(tensor: torch.Tensor) -> np.ndarray:
    """A float tensor as a C-contiguous numpy array on the host, losing no precision.

    float64 stays float64 (a float64 computation is returned at float64 precision);
    float32, float16 and bfloat16 become float32, which holds them exactly.
    """
    dtype = torch.float64 if tensor.dtype == torch.float64 else torch.float32
    return np.ascontiguousarray(tensor.detach().to("cpu", dtype).numpy())


def typed_array(array: np.ndarray, code: str) -> dict[str, Any]:
    """``{"dtype": code, "bdata": base64, "shape": [...]}`` of a C-contiguous array."""
    data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False)
    # Encoded from the array's own buffer: no bytes copy of the array.
    return {
        "dtype": code,
        "bdata": base64.b64encode(data.data.cast("B")).decode("ascii"),
        "shape": list(array.shape),
    }


def encode_floats(tensor: torch.Tensor, encoding: str) -> Any:
    """A float tensor for the response, in the request's encoding.

    "json" gives a numpy array (orjson writes nested lists, NaN as null) in float64
    for a float64 tensor, else float32; the base64 encodings give a typed array in
    the float type they name.
    """
    array = host_floats(tensor)
    if encoding == "json":
        return array
    code, dtype = _FLOAT_CODES[encoding]
    return typed_array(array.astype(dtype, copy=False), code)


def encode_bools(tensor: torch.Tensor, encoding: str) -> Any:
    """A bool tensor: nested true/false, or a base64 uint8 array (1 = True)."""
    array = np.ascontiguousarray(tensor.detach().cpu().numpy())
    if encoding == "json":
        return array
    return typed_array(array.astype(np.uint8), "u1")


def json_response(payload: dict[str, Any], status_code: int = 200) -> Response:
    """Serialise with orjson (numpy arrays natively) into an application/json response."""
    return Response(
        content=orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY),
        status_code=status_code,
        media_type="application/json",
    )


STREAM_MIN_CELLS: Final = 1 << 20
"""Arrays of at least this many numbers are encoded while the response streams."""
_CHUNK_BYTES: Final = 3 << 20  # a multiple of 3: base64 chunks join without padding


class Deferred:
    """A large array, encoded chunk by chunk as the response is sent.

    Neither the whole base64 text nor the whole JSON text of the array exists in
    memory at once: only the array itself and one chunk.

    Args:
        array: C-contiguous numpy array (float64, float32, float16 or uint8).
        encoding: "json", "base64_float32", "base64_float16" or "base64_float64".
    """

    def __init__(self, array: np.ndarray, encoding: str) -> None:
        self.array = np.ascontiguousarray(array)
        self.encoding = encoding

    def chunks(self) -> Iterator[bytes]:
        """The array's JSON text, in pieces."""
        if self.encoding == "json":
            yield from _json_chunks(self.array)
            return
        code, dtype = _FLOAT_CODES[self.encoding]
        data = self.array.astype(np.dtype(dtype).newbyteorder("<"), copy=False)
        buffer = data.data.cast("B")
        yield b'{"dtype":"' + code.encode() + b'","bdata":"'
        for start in range(0, len(buffer), _CHUNK_BYTES):
            yield base64.b64encode(buffer[start : start + _CHUNK_BYTES])
        yield b'","shape":' + orjson.dumps(list(data.shape)) + b"}"


def _json_chunks(array: np.ndarray) -> Iterator[bytes]:
    if array.ndim <= 2:
        yield orjson.dumps(array, option=orjson.OPT_SERIALIZE_NUMPY)
        return
    yield b"["
    for i in range(array.shape[0]):
        if i:
            yield b","
        yield from _json_chunks(array[i])
    yield b"]"


def encode_large(tensor: torch.Tensor, encoding: str) -> Any:
    """Like :func:`encode_floats`, but a large tensor becomes a :class:`Deferred`."""
    if tensor.numel() < STREAM_MIN_CELLS:
        return encode_floats(tensor, encoding)
    return Deferred(host_floats(tensor), encoding)


def stream_json(payload: dict[str, Any]) -> Iterator[bytes]:
    """The payload's JSON text in pieces, :class:`Deferred` arrays encoded in place."""
    deferred: list[Deferred] = []

    def placeholder(value: Any) -> str:
        if isinstance(value, Deferred):
            deferred.append(value)
            return f"\x00{len(deferred) - 1}\x00"
        raise TypeError(f"cannot serialise {type(value).__name__}")

    text = orjson.dumps(payload, default=placeholder, option=orjson.OPT_SERIALIZE_NUMPY)
    parts = _PLACEHOLDER.split(text)
    yield parts[0]
    for index, rest in zip(parts[1::2], parts[2::2], strict=True):
        yield from deferred[int(index)].chunks()
        yield rest


_PLACEHOLDER: Final = re.compile(rb'"\\u0000(\d+)\\u0000"')


def respond(payload: dict[str, Any]) -> Response:
    """A streamed response when the payload holds :class:`Deferred` arrays, else a plain one."""

    def has_deferred(value: Any) -> bool:
        if isinstance(value, Deferred):
            return True
        if isinstance(value, dict):
            return any(has_deferred(v) for v in value.values())
        return False

    if has_deferred(payload):
        return StreamingResponse(stream_json(payload), media_type="application/json")
    return json_response(payload)
