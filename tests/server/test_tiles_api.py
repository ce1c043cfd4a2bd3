"""POST /api/v1/models/attention/tiles: zoom tiles of a kept pass, exact against eager attention.

A tiny Llama (grouped-query heads, 1,024 positions) served from a folder; a streamed grid
of a 700-token input keeps its pass and names it (``pass_key`` on the end line); every tile
then equals transformers' own eager ``output_attentions`` of the same ids: the whole map at
z = 0 block-max (and block-mean) pooled by the tile's factor, a deepest tile cell for cell
with its tokens. Bad tiles are 422 naming the field; a pass no longer kept is a 410.
"""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from attnviz.attention.pooling import block_reduce
from fastapi.testclient import TestClient

from tests.pretrained import tiny
from tests.pretrained.support import eager_model, require_transformers
from tests.server.support import serving_model_dirs
from tests.support.api import decode

pytestmark = pytest.mark.usefixtures("pretrained_extra")

MODEL = "tiles-llama"
TILES = "/api/v1/models/attention/tiles"
LENGTH = 700


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_transformers()
    return tiny.save_tiny(
        "llama", tmp_path_factory.mktemp("tiles") / MODEL, max_position_embeddings=1024
    )


@pytest.fixture(scope="module")
def client(folder: Path) -> Iterator[TestClient]:
    with serving_model_dirs([folder]) as served:
        yield served


def text() -> str:
    """LENGTH words the tiny tokenizer knows: one token each."""
    return " ".join(tiny.WORDS[(i * 7) % len(tiny.WORDS)] for i in range(LENGTH))


@pytest.fixture(scope="module")
def streamed(client: TestClient) -> tuple[dict[str, Any], dict[str, Any]]:
    """The streamed grid's start and end lines."""
    body = {"model": MODEL, "texts": [text()], "display_size": 16}
    response = client.post("/api/v1/models/attention/layers", json=body)
    assert response.status_code == 200, response.text
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert lines[0]["type"] == "start" and lines[-1]["type"] == "end", lines[-1]
    return lines[0], lines[-1]


@pytest.fixture(scope="module")
def eager_maps(folder: Path, streamed: tuple[dict[str, Any], dict[str, Any]]) -> Any:
    """transformers' own eager weights of the streamed ids: (N, H, L, L)."""
    start, _ = streamed
    ids = torch.tensor(
        [start["input_ids"][0] if isinstance(start["input_ids"][0], list) else start["input_ids"]]
    )
    with torch.inference_mode():
        out = eager_model(folder)(input_ids=ids, output_attentions=True)
    return torch.stack([a[0] for a in out.attentions])


def ask(client: TestClient, pass_key: str, **fields: Any) -> Any:
    return client.post(
        TILES, json={"pass_key": pass_key, "layer_index": 1, "head_index": 2, **fields}
    )


def weights(answer: dict[str, Any]) -> torch.Tensor:
    spec = answer["weights"]
    if isinstance(spec, dict):
        return torch.from_numpy(np.array(decode(spec, expect="f4")))
    return torch.tensor(spec, dtype=torch.float32)


def test_the_grid_names_its_kept_pass_and_zoom_tiles_equal_eager_attention(
    client: TestClient, streamed: tuple[dict[str, Any], dict[str, Any]], eager_maps: Any
) -> None:
    start, end = streamed
    pass_key = end["pass_key"]
    assert isinstance(pass_key, str) and len(pass_key) == 32
    reference = eager_maps[1, 2]  # layer 1, head 2: (L, L)
    length = reference.shape[-1]
    assert length == LENGTH
    whole = ask(client, pass_key, z=0).json()
    assert (whole["max_z"], whole["factor"]) == (2, 4)  # 700 tokens: 256 * 4 >= 700
    assert whole["rows"] == [0, length] and whole["cols"] == [0, length]
    assert whole["query_tokens"] is None  # a cell is 4 x 4 tokens
    torch.testing.assert_close(
        weights(whole), block_reduce(reference, 4, 4, "max"), atol=1e-5, rtol=0
    )
    mean = ask(client, pass_key, z=1, x=1, y=1, reduce="mean", encoding="base64_float32").json()
    assert (mean["factor"], mean["rows"], mean["cols"]) == (2, [512, length], [512, length])
    want = block_reduce(reference[512:, 512:], 2, 2, "mean")
    torch.testing.assert_close(weights(mean), want, atol=1e-5, rtol=0)
    deep = ask(client, pass_key, z=2, x=1, y=2).json()
    assert (deep["factor"], deep["rows"], deep["cols"]) == (1, [512, length], [256, 512])
    torch.testing.assert_close(weights(deep), reference[512:, 256:512], atol=1e-5, rtol=0)
    tokens = start["tokens"][0] if isinstance(start["tokens"][0], list) else start["tokens"]
    assert deep["query_tokens"] == tokens[512:] and deep["key_tokens"] == tokens[256:512]
    above = ask(client, pass_key, z=2, x=2, y=0).json()  # keys after every query: causal zeros
    assert float(weights(above).abs().max()) == 0.0


def test_the_one_shot_answer_names_its_kept_pass_too(client: TestClient) -> None:
    body = {"model": MODEL, "texts": [text()], "sequence_index": 0, "display_size": 16}
    answer = client.post("/api/v1/models/attention", json=body).json()
    assert isinstance(answer["pass_key"], str)
    assert ask(client, answer["pass_key"], z=0).status_code == 200


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"z": 3}, "z"),
        ({"z": 1, "x": 2}, "x"),
        ({"z": 2, "y": 3}, "y"),
        ({"head_index": 4}, "head_index"),
        ({"layer_index": 2}, "layer_index"),
        ({"block": "encoder"}, "block"),
    ],
)
def test_a_tile_not_in_the_map_is_a_422_naming_its_field(
    client: TestClient,
    streamed: tuple[dict[str, Any], dict[str, Any]],
    fields: dict[str, Any],
    field: str,
) -> None:
    response = ask(client, streamed[1]["pass_key"], **fields)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["body", field]


def test_a_pass_no_longer_kept_is_a_410_naming_pass_key(
    client: TestClient, streamed: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    response = ask(client, "0123456789abcdef0123456789abcdef")
    assert response.status_code == 410
    assert response.json()["detail"][0]["loc"] == ["body", "pass_key"]
    assert "ask for the grid again" in response.json()["detail"][0]["msg"]
    assert ask(client, "not hex!").status_code == 422
