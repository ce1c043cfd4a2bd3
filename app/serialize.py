"""Array transport for the JSON API: plain numbers, or base64 typed arrays.

Plain JSON goes through orjson, which writes numpy arrays natively (NaN as null);
nothing walks nested Python lists through ``jsonable_encoder``. The compact
encodings follow Plotly.js's typed-array spec, ``{"dtype", "bdata", "shape"}``:
``bdata`` is the base64 of the array's bytes in C order, little-endian, and
``dtype`` is "f4" (float32), "f2" (float16) or "u1" (uint8, for masks).
"""

from __future__ import annotations

import base64
from typing import Any, Final, Literal, get_args

import numpy as np
import orjson
import torch
from fastapi.responses import Response

Encoding = Literal["json", "base64_float32", "base64_float16"]
ENCODINGS: Final[tuple[str, ...]] = get_args(Encoding)
_FLOAT_CODES: Final = {"base64_float32": ("f4", np.float32), "base64_float16": ("f2", np.float16)}


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

    "json" gives a numpy array (orjson writes nested lists, NaN as null); the
    base64 encodings give a typed array in float32 or float16.
    """
    array = np.ascontiguousarray(tensor.detach().to("cpu", torch.float32).numpy())
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
