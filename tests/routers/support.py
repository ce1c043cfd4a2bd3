"""Shared by the API tests."""

import base64
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

DTYPES = {"f8": "<f8", "f4": "<f4", "f2": "<f2", "u1": "u1"}


def decode(spec: dict[str, Any], expect: str | None = None) -> np.ndarray:
    """A base64 typed array {dtype, bdata, shape} of a response as a numpy array.

    ``expect``, when given, is the dtype code the array must have.
    """
    if expect is not None:
        assert spec["dtype"] == expect
    dtype = DTYPES[spec["dtype"]]
    return np.frombuffer(base64.b64decode(spec["bdata"]), dtype=dtype).reshape(spec["shape"])


@contextmanager
def serving(env: dict[str, str], wait_s: float = 120) -> Iterator[Any]:
    """A TestClient of an app started with ``env`` set, once every model has loaded (or
    failed) within ``wait_s`` seconds; the settings and models are reset after."""
    from attnviz.pretrained import MODELS
    from attnviz.server.main import create_app
    from attnviz.server.settings import get_settings
    from fastapi.testclient import TestClient

    mp = pytest.MonkeyPatch()
    for name, value in env.items():
        mp.setenv(name, value)
    get_settings.cache_clear()
    try:
        with TestClient(create_app()) as client:
            assert MODELS.wait(wait_s)
            yield client
    finally:
        mp.undo()
        get_settings.cache_clear()
        MODELS.clear()


@contextmanager
def serving_model_dirs(folders: Sequence[Path]) -> Iterator[Any]:
    """:func:`serving` the local ``folders`` (ATTNVIZ_MODEL_DIRS), no packaged model."""
    env = {
        "ATTNVIZ_MODEL_DIRS": json.dumps([str(f) for f in folders]),
        "ATTNVIZ_PACKAGED_MODELS": "false",
    }
    with serving(env) as client:
        yield client
