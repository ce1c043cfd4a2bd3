"""Impossible requests are refused before anything runs (issue 29, classes 3 and 4).

Every index a one-input request can carry (layer_index, head_index, query_index, ablate's
layers and heads, target_index, target_token_id, neuron's query) is checked against the
model's config and the tokenised length, with every option it can be combined with
(display_size, max_new_tokens, hide_special_tokens, top_k, another method, another block),
on both routes, for a decoder, an encoder and an encoder-decoder: each is a 422 naming
the field, and no forward pass, generation or gradient pass has run (they are replaced
by functions that fail the test). Generation at the longest prompt the limits admit runs;
one token more is refused up front; a request whose estimated memory is over
ATTNVIZ_MAX_REQUEST_BYTES is a 413 with the estimate and the limit.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from tests.pretrained.tiny import TARGETS, TEXTS, WORDS, save_tiny
from tests.server.support import serving

KINDS = ("llama", "bert", "t5")
MAX_SEQ_LEN = 40
ROUTES = ("/api/v1/models/attention", "/api/v1/models/attention/layers")


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    root = tmp_path_factory.mktemp("admission")
    folders = [save_tiny(kind, root / f"tiny-{kind}") for kind in KINDS]
    env = {
        "ATTNVIZ_MODEL_DIRS": json.dumps([str(f) for f in folders]),
        "ATTNVIZ_PACKAGED_MODELS": "false",
        "ATTNVIZ_MAX_SEQ_LEN": str(MAX_SEQ_LEN),
    }
    with serving(env) as served:
        yield served


@pytest.fixture
def nothing_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if a forward pass, a generation or a gradient pass starts."""
    from attnviz.pretrained import PretrainedModel, recordings

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a model ran before the request was refused")

    monkeypatch.setattr(PretrainedModel, "run", refuse)
    monkeypatch.setattr(PretrainedModel, "generate", refuse)
    monkeypatch.setattr(recordings, "gradient_pass", refuse)
    recordings.RECORDINGS.clear()


def shape(kind: str, block: str, new_tokens: int) -> dict[str, int]:
    """The sizes an index is checked against: layers, heads, vocabulary, L_q, outputs."""
    from attnviz.pretrained import MODELS

    model = MODELS.get(f"tiny-{kind}")
    source = int(model.tokenize(TEXTS[:1]).input_ids.shape[1]) + new_tokens
    target = None
    if model.family == "encoder-decoder":
        target = int(model.decoder_inputs(TARGETS[:1]).input_ids.shape[1])
    return {
        "layers": model.block_layers(block),  # type: ignore[arg-type]
        "heads": model.block_heads(block),  # type: ignore[arg-type]
        "vocab": model.vocab_size,
        "queries": target if target is not None and block != "encoder" else source,
        "outputs": target if target is not None else source,
    }


FIELDS: dict[str, tuple[str, Any]] = {
    # name: (the field the 422 names, options from the sizes with one index out of range)
    "layer_index": ("layer_index", lambda s: {"layer_index": s["layers"]}),
    "layer_index 99": ("layer_index", lambda s: {"layer_index": 99}),
    "head_index": ("head_index", lambda s: {"layer_index": 0, "head_index": s["heads"]}),
    "query_index": ("query_index", lambda s: {"query_index": s["queries"]}),
    "ablate layer": ("ablate", lambda s: {"ablate": [[0, 0], [s["layers"], 0]]}),
    "ablate head": ("ablate", lambda s: {"ablate": [[0, s["heads"]]]}),
    "target_index": (
        "target_index",
        lambda s: {"method": "grad_rollout", "target_index": s["outputs"]},
    ),
    "target_token_id": (
        "target_token_id",
        lambda s: {"method": "head_importance", "target_token_id": s["vocab"]},
    ),
    "neuron's query": (
        "query_index",
        lambda s: {"neuron": True, "layer_index": 0, "head_index": 0, "query_index": s["queries"]},
    ),
}
COMBOS: dict[str, dict[str, Any]] = {
    "alone": {},
    "display_size": {"display_size": 8},
    "max_new_tokens": {"max_new_tokens": 3},
    "hide_special_tokens": {"hide_special_tokens": True},
    "top_k": {"top_k": 3},
    "method norm": {"method": "norm"},
    "block cross": {"block": "cross"},
    "block decoder": {"block": "decoder"},
}


def applies(kind: str, field: str, combo: str) -> bool:
    """Whether the combination is a valid request but for the index (so the index is why)."""
    options = FIELDS[field][1]({"layers": 1, "heads": 1, "vocab": 1, "queries": 1, "outputs": 1})
    method = options.get("method")
    decoder, encoder = kind == "llama", kind == "bert"
    if combo in ("max_new_tokens", "top_k") and not decoder:
        return False
    if combo.startswith("block") and kind != "t5":
        return False
    if field == "target_token_id" and encoder:
        return False
    if combo == "hide_special_tokens" and ("ablate" in options or "neuron" in options or method):
        return False
    if combo == "method norm" and (method or "neuron" in options):
        return False
    return not (method and combo == "block cross")  # gradient rollout needs square blocks


CASES = [
    pytest.param(kind, field, combo, route, id=f"{kind}-{field}-{combo}-{route.rsplit('/')[-1]}")
    for kind in KINDS
    for field in FIELDS
    for combo in COMBOS
    for route in ROUTES
    if applies(kind, field, combo)
]


@pytest.mark.parametrize(("kind", "field", "combo", "route"), CASES)
def test_an_index_out_of_range_is_refused_before_anything_runs(
    client: TestClient, nothing_runs: None, kind: str, field: str, combo: str, route: str
) -> None:
    extra = COMBOS[combo]
    sizes = shape(kind, extra.get("block", "decoder" if kind == "llama" else "encoder"),
                  extra.get("max_new_tokens", 0))  # fmt: skip
    named, options = FIELDS[field]
    body = {"model": f"tiny-{kind}", "texts": TEXTS[:1], "sequence_index": 0}
    if kind == "t5":
        body["targets"] = TARGETS[:1]
    response = client.post(route, json={**body, **extra, **options(sizes)})
    assert response.status_code == 422, response.text
    detail = response.json()["detail"][0]
    assert detail["loc"][-1] == named, detail
    assert "is not below" in detail["msg"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_last_index_in_range_is_accepted(client: TestClient, kind: str) -> None:
    block = "decoder" if kind == "llama" else "encoder"
    sizes = shape(kind, block, 0)
    body: dict[str, Any] = {"model": f"tiny-{kind}", "texts": TEXTS[:1], "sequence_index": 0}
    if kind == "t5":
        body["targets"] = TARGETS[:1]
    last = {
        "layer_index": sizes["layers"] - 1,
        "head_index": sizes["heads"] - 1,
        "query_index": sizes["queries"] - 1,
        "ablate": [[sizes["layers"] - 1, sizes["heads"] - 1]],
    }
    response = client.post(ROUTES[0], json={**body, **last})
    assert response.status_code == 200, response.text
    assert response.json()["shape"][:3] == [1, 1, 1]
    # The encoder-decoder's decoder is deeper than its encoder: its own layers count.
    if kind == "t5":
        deeper = {**body, "block": "decoder", "layer_index": 2}
        assert client.post(ROUTES[0], json=deeper).status_code == 200
        assert client.post(ROUTES[0], json={**deeper, "block": "encoder"}).status_code == 422


def prompt_of_length(length: int) -> str:
    """A tiny-llama prompt of exactly ``length`` tokens (its BOS and one token a word)."""
    from attnviz.pretrained import MODELS

    model = MODELS.get("tiny-llama")
    words = [WORDS[i % len(WORDS)] for i in range(length)]
    for count in range(length, 0, -1):
        text = " ".join(words[:count])
        if int(model.tokenize([text]).input_ids.shape[1]) == length:
            return text
    raise AssertionError(f"no prompt of {length} tokens")


@pytest.mark.parametrize("route", ROUTES)
def test_generation_at_the_longest_admitted_prompt(client: TestClient, route: str) -> None:
    new = 8
    longest = prompt_of_length(MAX_SEQ_LEN - new)
    body = {
        "model": "tiny-llama",
        "texts": [longest],
        "sequence_index": 0,
        "max_new_tokens": new,
        "display_size": 8,
    }
    response = client.post(route, json=body)
    assert response.status_code == 200, response.text
    lines = [json.loads(line) for line in response.text.splitlines()]
    first = lines[0] if route.endswith("layers") else response.json()
    generated = first["generation"]
    assert generated["prompt_length"] == MAX_SEQ_LEN - new
    assert 1 <= len(generated["ids"]) <= new
    assert len(first["tokens"][0]) == MAX_SEQ_LEN - new + len(generated["ids"])


def test_one_token_more_than_the_limit_is_refused_up_front(
    client: TestClient, nothing_runs: None
) -> None:
    new = 8
    body = {
        "model": "tiny-llama",
        "texts": [prompt_of_length(MAX_SEQ_LEN - new + 1)],
        "sequence_index": 0,
        "max_new_tokens": new,
    }
    for route in ROUTES:
        response = client.post(route, json=body)
        assert response.status_code == 413, response.text
        detail = response.json()["detail"][0]
        assert detail["loc"][-1] == "max_new_tokens"
        assert "ask for at most 7 new tokens" in detail["msg"]
        assert "ATTNVIZ_MAX_SEQ_LEN" in detail["msg"]


def test_generation_past_the_models_positions_is_refused_up_front(
    client: TestClient, nothing_runs: None
) -> None:
    from attnviz.server.settings import Settings, get_settings

    client.app.dependency_overrides[get_settings] = lambda: Settings(max_seq_len=1000)  # type: ignore[attr-defined]
    try:
        body = {
            "model": "tiny-llama",  # 64 positions
            "texts": [prompt_of_length(60)],
            "sequence_index": 0,
            "max_new_tokens": 5,
        }
        response = client.post(ROUTES[0], json=body)
    finally:
        client.app.dependency_overrides.clear()  # type: ignore[attr-defined]
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"][-1] == "max_new_tokens"
    assert "at most 4 new tokens" in response.json()["detail"][0]["msg"]


def test_a_request_over_the_memory_budget_is_a_413_with_the_estimate(
    client: TestClient, nothing_runs: None
) -> None:
    from attnviz.pretrained import MODELS
    from attnviz.pretrained.admission import estimate_peak_bytes
    from attnviz.pretrained.lengths import InputLengths
    from attnviz.server.settings import Settings, get_settings

    model = MODELS.get("tiny-llama")
    text = prompt_of_length(24)
    # the streamed grid is computed during its pass (observed), its small recording kept
    alone = estimate_peak_bytes(
        model, InputLengths(24), block="decoder", display_size=8, observed=True
    )
    generating = estimate_peak_bytes(
        model, InputLengths(24, new_tokens=16), block="decoder", display_size=8, observed=True
    )
    assert alone < generating
    body = {
        "model": "tiny-llama",
        "texts": [text],
        "sequence_index": 0,
        "max_new_tokens": 16,
        "display_size": 8,
    }
    for limit, field in (((alone + generating) // 2, "max_new_tokens"), (alone - 1, "texts")):
        client.app.dependency_overrides[get_settings] = lambda x=limit: Settings(  # type: ignore[attr-defined]
            max_request_bytes=x
        )
        try:
            response = client.post(ROUTES[1], json=body)
        finally:
            client.app.dependency_overrides.clear()  # type: ignore[attr-defined]
        assert response.status_code == 413, response.text
        detail = response.json()["detail"][0]
        assert detail["loc"][-1] == field
        assert "ATTNVIZ_MAX_REQUEST_BYTES" in detail["msg"]
        assert f"{generating / 2**20:,.0f} MiB" in detail["msg"]


@pytest.mark.parametrize("route", ROUTES)
def test_a_request_over_the_device_s_free_memory_is_a_413_naming_both_figures(
    client: TestClient, nothing_runs: None, monkeypatch: pytest.MonkeyPatch, route: str
) -> None:
    """On a GPU, the device's free memory (torch.cuda.mem_get_info) is a second limit."""
    from attnviz.pretrained import view_plan

    monkeypatch.setattr(view_plan, "device_free_bytes", lambda device: 3 * 2**20)
    body = {"model": "tiny-llama", "texts": [prompt_of_length(24)], "sequence_index": 0}
    response = client.post(route, json={**body, "display_size": 8})
    assert response.status_code == 413, response.text
    detail = response.json()["detail"][0]
    assert detail["loc"][-1] == "texts"
    assert "over the 3 MiB free on cpu" in detail["msg"] and "would need about" in detail["msg"]


def test_the_recording_is_estimated_in_the_model_s_dtype() -> None:
    from attnviz.pretrained.admission import recording_bytes
    from attnviz.pretrained.lengths import InputLengths

    model = smollm2_shape()
    full = recording_bytes(model, InputLengths(1024))
    model.dtype = torch.bfloat16
    assert recording_bytes(model, InputLengths(1024)) * 2 == full


def test_the_estimate_grows_with_the_input_and_admits_smollm2_at_4096_tokens() -> None:
    """The default budget admits the longest input of the packaged decoder's shape."""

    from attnviz.pretrained.admission import estimate_peak_bytes
    from attnviz.pretrained.lengths import InputLengths
    from attnviz.server.limits import MAX_REQUEST_BYTES

    smollm2 = smollm2_shape()
    sizes = [
        estimate_peak_bytes(smollm2, InputLengths(n), block="decoder", display_size=64)  # type: ignore[arg-type]
        for n in (256, 1024, 4032)
    ]
    assert sizes == sorted(sizes)
    longest = InputLengths(4032, new_tokens=64)
    assert estimate_peak_bytes(smollm2, longest, block="decoder", display_size=64) < (  # type: ignore[arg-type]
        MAX_REQUEST_BYTES
    )


def test_the_grid_at_8192_tokens_is_admitted_observed_or_replayed_from_its_recording() -> None:
    """Computed during the pass or replayed from a kept recording, the grid holds a chunk of
    a layer's weights at a time, not a group of heads: both fit at SmolLM2's 8,192 tokens,
    and the replayed one is counted with the recording it holds."""
    from attnviz.pretrained.admission import (
        InputLengths,
        estimate_peak_bytes,
        recording_bytes,
    )
    from attnviz.server.limits import MAX_REQUEST_BYTES, MAX_TOKENS

    smollm2 = smollm2_shape()
    lengths = InputLengths(MAX_TOKENS)
    observed = estimate_peak_bytes(
        smollm2, lengths, block="decoder", display_size=64, observed=True, recorded=False
    )
    walked = estimate_peak_bytes(smollm2, lengths, block="decoder", display_size=64)
    # the recording, when kept, is counted; the mask alone when not
    kept = estimate_peak_bytes(
        smollm2, lengths, block="decoder", display_size=64, observed=True, recorded=True
    )
    assert observed < kept <= walked < MAX_REQUEST_BYTES
    assert walked >= recording_bytes(smollm2, lengths) > observed / 2


def smollm2_shape() -> Any:
    """SmolLM2-135M's config as the estimate reads it: 30 layers, 9 heads, 3 key/value heads."""
    from types import SimpleNamespace

    from attnviz.pretrained.families import family_spec

    return SimpleNamespace(
        name="SmolLM2-135M-Instruct",
        blocks=("decoder",),
        family="decoder",
        spec=family_spec("decoder"),
        d_model=576,
        num_heads=9,
        num_key_value_heads=3,
        num_layers=30,
        vocab_size=49_152,
        block_layers=lambda block: 30,
        block_heads=lambda block: 9,
        block_kv_heads=lambda block: 3,
        attention_path="recorded",
    )


def test_a_gradient_method_counts_its_own_pass_in_the_estimate() -> None:
    """At its 704-token bound the gradient pass (every weight and its gradient) is the
    largest phase: check_memory refuses under a limit the plain request would meet."""
    from attnviz.attention.errors import InputTooLargeError
    from attnviz.pretrained.admission import check_memory, estimate_peak_bytes
    from attnviz.pretrained.lengths import InputLengths

    model, lengths = smollm2_shape(), InputLengths(704)
    plain = estimate_peak_bytes(model, lengths, block="decoder")
    with_gradients = estimate_peak_bytes(model, lengths, block="decoder", method="grad_rollout")
    assert plain < with_gradients
    assert check_memory(model, lengths, plain, block="decoder") == plain
    with pytest.raises(InputTooLargeError) as refused:
        check_memory(model, lengths, plain, block="decoder", method="grad_rollout")
    assert refused.value.field == "texts"
