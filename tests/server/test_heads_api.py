"""POST /api/v1/models/heads and /heads/stream: the head atlas over HTTP (issue 33).

Tiny models built from configs (tests/pretrained/tiny.py); the scores themselves are
checked against brute force in tests/pretrained/test_heads.py: here, that the route
answers them whole, keeps them on disk, streams its progress and refuses bad input
with a 4xx naming the field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from attnviz.pretrained import MODELS
from attnviz.pretrained.atlas import DEFINITION_VERSION, SCORES, head_scores, repeat_length
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.pretrained.media import save_tiny_vision
from tests.pretrained.tiny import save_tiny
from tests.server.support import serving

TEXTS = ["the cat sat on the mat", "a dog ran in the park and the cat sat"]


@pytest.fixture(scope="module")
def atlas_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    """A server offering tiny-llama (a decoder), tiny-bert (an encoder) and tiny-vit (an
    image model), its cache in a folder of its own."""
    root = tmp_path_factory.mktemp("atlas-models")
    cache = tmp_path_factory.mktemp("atlas-cache")
    folders = [save_tiny(kind, root / f"tiny-{kind}") for kind in ("llama", "bert")]
    folders.append(save_tiny_vision("vit", root / "tiny-vit"))
    env = {
        "ATTNVIZ_MODEL_DIRS": json.dumps([str(f) for f in folders]),
        "ATTNVIZ_PACKAGED_MODELS": "false",
        "ATTNVIZ_CACHE_DIR": str(cache),
    }
    with serving(env) as client:
        yield client, cache


def post(client: Any, **body: Any) -> Any:
    return client.post("/api/v1/models/heads", json=body)


def stream(client: Any, **body: Any) -> list[dict[str, Any]]:
    """POST /heads/stream: its NDJSON lines, decoded (asserts a 200 of NDJSON)."""
    with client.stream("POST", "/api/v1/models/heads/stream", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/x-ndjson")
        return [json.loads(line) for line in response.iter_lines() if line]


@pytest.mark.parametrize("kind", ["llama", "bert"])
def test_the_atlas_is_every_score_of_every_head_as_the_library_computes_it(
    atlas_api: tuple[Any, Path], kind: str
) -> None:
    client, _ = atlas_api
    response = post(client, model=f"tiny-{kind}", texts=TEXTS)
    assert response.status_code == 200, response.text
    body = response.json()
    model = MODELS.get(f"tiny-{kind}")
    reference = head_scores(model, TEXTS, repeat_length=repeat_length(model))
    assert body["num_layers"] == reference.num_layers
    assert body["num_heads"] == reference.num_heads
    assert set(body["scores"]) == set(SCORES) == set(body["definitions"])
    for name in SCORES:
        got = np.array(body["scores"][name])
        assert got.shape == (reference.num_layers, reference.num_heads)
        np.testing.assert_allclose(got, reference.scores[name], rtol=1e-6, atol=1e-9)
        definition = body["definitions"][name]
        assert definition["name"] == name and definition["source"] and definition["definition"]
    assert body["definitions"]["entropy"]["unit"] == "nats"
    assert body["corpus"]["name"] == "texts" and body["corpus"]["sequences"] == len(TEXTS)
    assert body["definition_version"] == DEFINITION_VERSION
    assert all(math.isfinite(v) for rows in body["scores"].values() for r in rows for v in r)


def test_the_atlas_carries_each_heads_best_passages(atlas_api: tuple[Any, Path]) -> None:
    """The examples of the library's run (itself checked by brute force), kept on disk too."""
    client, _ = atlas_api
    texts = [*TEXTS, "the bird sang", "a red house and a big tree and the cat"]
    body = post(client, model="tiny-llama", texts=texts).json()
    model = MODELS.get("tiny-llama")
    reference = head_scores(model, texts, repeat_length=repeat_length(model))
    assert body["top_k"] == reference.top_k == 8
    assert body["examples"] == [
        {**row, "value": pytest.approx(row["value"], rel=1e-9)} for row in reference.examples
    ]
    heads = {(r["score"], r["layer"], r["head"]) for r in body["examples"]}
    assert len(heads) == len(SCORES) * body["num_layers"] * body["num_heads"]
    for row in body["examples"]:
        if row["kind"] == "corpus":
            text = body["passages"][str(row["passage"])]
            assert text == texts[row["passage"]]
            ids = model.tokenizer(text)["input_ids"]
            assert row["token"] == model.token_strings([ids[row["position"]]])[0]
    best = [r for r in body["examples"] if (r["score"], r["layer"], r["head"]) == ("self", 0, 0)]
    assert [r["rank"] for r in best] == list(range(len(best)))
    assert [r["value"] for r in best] == sorted((r["value"] for r in best), reverse=True)
    cached = post(client, model="tiny-llama", texts=texts).json()
    assert cached["cached"] is True and cached["examples"] == body["examples"]


def test_a_second_request_reads_the_atlas_from_disk(atlas_api: tuple[Any, Path]) -> None:
    client, cache = atlas_api
    texts = ["one more corpus, its own key", "and a second line of it"]
    first = post(client, model="tiny-llama", texts=texts).json()
    assert first["cached"] is False
    kept = list((cache / "head-atlas").glob("tiny-llama-*.json"))
    assert kept, "nothing was written to the cache"
    second = post(client, model="tiny-llama", texts=texts).json()
    assert second["cached"] is True
    assert second["scores"] == first["scores"]
    # Another corpus is another key: computed afresh.
    other = post(client, model="tiny-llama", texts=[*texts, "a third"]).json()
    assert other["cached"] is False
    # A cache file that is not an atlas is ignored (computed again, then replaced).
    for path in (cache / "head-atlas").glob("tiny-llama-*.json"):
        path.write_text("{not json", encoding="utf-8")
    again = post(client, model="tiny-llama", texts=texts).json()
    assert again["cached"] is False and again["scores"] == first["scores"]


def test_the_stream_sends_progress_then_the_atlas(atlas_api: tuple[Any, Path]) -> None:
    client, _ = atlas_api
    texts = ["streamed atlas text one", "streamed atlas text two", "and three"]
    lines = stream(client, model="tiny-bert", texts=texts)
    progress = [line for line in lines if line["type"] == "progress"]
    assert lines[-1]["type"] == "end"
    total = progress[-1]["total"]
    assert [p["done"] for p in progress] == list(range(1, total + 1))
    assert total >= len(texts)  # one pass per text, and the induction batches
    whole = post(client, model="tiny-bert", texts=texts).json()
    assert lines[-1]["scores"] == whole["scores"] and whole["cached"] is True
    # From the cache: no progress, the atlas at once.
    cached = stream(client, model="tiny-bert", texts=texts)
    assert [line["type"] for line in cached] == ["end"] and cached[0]["cached"] is True


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"model": "no-such-model"}, "model"),
        ({"model": "tiny-vit"}, "model"),  # an image model: no score is defined for it yet
        ({"model": "tiny-llama", "texts": []}, "texts"),
        ({"model": "tiny-llama", "texts": ["fine", "   "]}, "texts.1"),
        ({"model": "tiny-llama", "texts": "not a list"}, "texts"),
        ({"model": "tiny-llama", "device": "tpu"}, "device"),
        ({"model": "tiny-llama", "extra": 1}, "extra"),
    ],
)
def test_bad_input_is_a_422_naming_the_field(
    atlas_api: tuple[Any, Path], body: dict[str, Any], field: str
) -> None:
    client, _ = atlas_api
    for route in ("/api/v1/models/heads", "/api/v1/models/heads/stream"):
        response = client.post(route, json=body)
        assert response.status_code == 422, response.text
        locations = [".".join(str(p) for p in d["loc"][1:]) for d in response.json()["detail"]]
        assert any(loc.startswith(field) for loc in locations), locations


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "model": st.sampled_from(["tiny-llama", "tiny-bert", "", "x" * 300]) | JSON,
        "texts": st.lists(st.text(max_size=30), max_size=3) | JSON,
        "device": st.sampled_from(["auto", "cpu", "cuda", "CPU"]) | JSON,
    },
)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=st.one_of(JSON, FIELDS))
def test_any_json_gets_an_atlas_or_a_4xx_naming_a_field(
    atlas_api: tuple[Any, Path], body: Any
) -> None:
    client, _ = atlas_api
    content = json.dumps(body).encode()  # NaN and Infinity as Python writes them
    for route in ("/api/v1/models/heads", "/api/v1/models/heads/stream"):
        response = client.post(route, content=content, headers={"content-type": "application/json"})
        assert response.status_code in (200, 422), response.text
        if response.status_code == 422:
            for entry in response.json()["detail"]:
                assert entry["loc"][0] == "body" and entry["msg"], entry
        elif route.endswith("stream"):
            last = json.loads(response.text.strip().splitlines()[-1])
            assert last["type"] in ("end", "error"), last
            if last["type"] == "error":  # e.g. cuda on a machine without one
                assert last["detail"]
        else:
            scores = response.json()["scores"]
            assert all(math.isfinite(v) for rows in scores.values() for r in rows for v in r)
