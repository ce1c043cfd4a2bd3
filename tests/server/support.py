"""Shared by the API tests."""

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")


@contextmanager
def serving(env: dict[str, str], wait_s: float = 120, models: Sequence[Any] = ()) -> Iterator[Any]:
    """A TestClient of an app started with ``env`` set (and ``models`` loaded in Python,
    ``create_app(models)``), once every model has loaded (or failed) within ``wait_s``
    seconds; the settings and models are reset after."""
    from attnviz.pretrained import MODELS
    from attnviz.server.main import create_app
    from attnviz.server.settings import get_settings
    from fastapi.testclient import TestClient

    mp = pytest.MonkeyPatch()
    for name, value in env.items():
        mp.setenv(name, value)
    get_settings.cache_clear()
    try:
        with TestClient(create_app(models)) as client:
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


def ask_tiny(client: Any, kind: str, **fields: Any) -> dict[str, Any]:
    """POST /api/v1/models/attention for ``tiny-<kind>`` (the ``tiny_models`` fixture): the
    first of tiny.TEXTS alone (sequence_index 0), an encoder-decoder's first target with it;
    asserts a 200 and returns the JSON."""
    from tests.pretrained.tiny import FAMILIES, TARGETS, TEXTS

    body = {"model": f"tiny-{kind}", "texts": TEXTS[:1], "sequence_index": 0, **fields}
    if FAMILIES[kind] == "encoder-decoder":
        body["targets"] = TARGETS[:1]
    response = client.post("/api/v1/models/attention", json=body)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def output_projections(kind: str, model: Any) -> dict[str, list[Any]]:
    """Each block's attention output projections, layer 0 first, in transformers' modules."""
    if kind in ("bert", "roberta"):
        return {"encoder": [layer.attention.output.dense for layer in model.encoder.layer]}
    if kind == "distilbert":
        return {"encoder": [layer.attention.out_lin for layer in model.transformer.layer]}
    if kind == "gpt2":
        return {"decoder": [block.attn.c_proj for block in model.transformer.h]}
    if kind in ("llama", "mistral", "qwen2"):
        return {"decoder": [layer.self_attn.o_proj for layer in model.model.layers]}
    if kind == "t5":
        return {
            "encoder": [block.layer[0].SelfAttention.o for block in model.encoder.block],
            "decoder": [block.layer[0].SelfAttention.o for block in model.decoder.block],
            "cross": [block.layer[1].EncDecAttention.o for block in model.decoder.block],
        }
    assert kind == "bart"
    return {
        "encoder": [layer.self_attn.out_proj for layer in model.model.encoder.layers],
        "decoder": [layer.self_attn.out_proj for layer in model.model.decoder.layers],
        "cross": [layer.encoder_attn.out_proj for layer in model.model.decoder.layers],
    }


def run_in_a_thread(scenario: Callable[[], Awaitable[T]]) -> T:
    """``asyncio.run(scenario())`` in a thread of its own (asyncio.run needs a thread with no
    loop running, and a test may run beside another's loop); its error re-raised here."""
    results: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(asyncio.run(scenario()))
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return results[0]
