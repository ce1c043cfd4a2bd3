"""Shared by the API tests."""

import base64
from typing import Any

import numpy as np

DTYPES = {"f8": "<f8", "f4": "<f4", "f2": "<f2", "u1": "u1"}


def decode(spec: dict[str, Any], expect: str | None = None) -> np.ndarray:
    """A base64 typed array {dtype, bdata, shape} of a response as a numpy array.

    ``expect``, when given, is the dtype code the array must have.
    """
    if expect is not None:
        assert spec["dtype"] == expect
    dtype = DTYPES[spec["dtype"]]
    return np.frombuffer(base64.b64decode(spec["bdata"]), dtype=dtype).reshape(spec["shape"])
