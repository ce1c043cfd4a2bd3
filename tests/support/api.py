"""Helpers of the API tests (tests/server) and of the browser tests that check the page
against the API's numbers: nothing here is a test."""

from __future__ import annotations

import base64
import time
from typing import TYPE_CHECKING, Any

import httpx2 as httpx
import numpy as np

if TYPE_CHECKING:
    import torch

DTYPES = {"f8": "<f8", "f4": "<f4", "f2": "<f2", "u1": "u1"}


def decode(spec: dict[str, Any], expect: str | None = None) -> np.ndarray:
    """A base64 typed array {dtype, bdata, shape} of a response as a numpy array.

    ``expect``, when given, is the dtype code the array must have.
    """
    if expect is not None:
        assert spec["dtype"] == expect
    dtype = DTYPES[spec["dtype"]]
    return np.frombuffer(base64.b64decode(spec["bdata"]), dtype=dtype).reshape(spec["shape"])


def wait_model_ready(url: str, name: str, timeout_s: float = 300.0) -> None:
    """Poll GET /api/v1/models of the server at ``url`` until ``name`` is ready (a server
    loads its models in the background: the event a test waits on).

    Raises:
        AssertionError: not ready after ``timeout_s`` (a bound on a hang, not on speed:
            a busy machine loads slowly), or the model failed to load.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        models = httpx.get(f"{url}/api/v1/models", timeout=timeout_s).json()["models"]
        states = {m["name"]: m["state"] for m in models}
        if states.get(name) == "ready":
            return
        assert states.get(name) != "failed", f"{name} failed to load: {models}"
        assert time.monotonic() < deadline, f"{name} not ready after {timeout_s:g} s: {states}"
        time.sleep(0.2)


def merged_reference(maps: torch.Tensor, words: list[int]) -> torch.Tensor:
    """The documented merge, written out: M[a, b] = mean over a's query pieces of the
    sum over b's key pieces (words: the word number of each token, runs = words)."""
    import torch

    groups: list[list[int]] = []
    for i, word in enumerate(words):
        if groups and words[groups[-1][0]] == word:
            groups[-1].append(i)
        else:
            groups.append([i])
    out = torch.zeros(*maps.shape[:-2], len(groups), len(groups))
    for a, rows in enumerate(groups):
        for b, cols in enumerate(groups):
            out[..., a, b] = maps[..., rows, :][..., cols].sum(dim=-1).mean(dim=-1)
    return out
