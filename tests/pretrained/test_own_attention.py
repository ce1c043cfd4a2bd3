"""Families whose attention modules bypass transformers' attention interface, drawn exactly.

GPT-Neo (global and local layers, unscaled scores) and BLOOM (ALiBi) compute attention
inside their own modules: nothing reaches AttnViz's recorder. Such a model is drawn from
its own eager ``output_attentions`` (:class:`attnviz.pretrained.calls.WeightsRecording`):
tiny random models of both, 2 layers each, are checked against transformers' own
``output_attentions`` of the same folder to 1e-5, in Python and through the API (one input,
the padded batch, the streamed grid, generation), and the response, the model list and the
refusals of what needs queries, keys or values say that the fused path is not available.
"""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from attnviz.pretrained import ModelFormatError, PretrainedModel
from attnviz.pretrained.loading import load_model_dir

from tests.pretrained import tiny
from tests.pretrained.support import require_transformers
from tests.server.support import serving_model_dirs

LONG = "the cat sat on the mat because it was tired and the dog ran to the park"
"""Longer than GPT-Neo's local window (tiny.SLIDING_WINDOW): its local layer forgets."""
KINDS = list(tiny.OWN_ATTENTION)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    require_transformers()
    root = tmp_path_factory.mktemp("own-attention")
    return {kind: tiny.save_tiny(kind, root / kind) for kind in KINDS}


@pytest.fixture(scope="module")
def models(folders: dict[str, Path]) -> dict[str, PretrainedModel]:
    loaded = {}
    for kind, folder in folders.items():
        model = load_model_dir(kind, folder)
        assert isinstance(model, PretrainedModel)
        model.warm_up()
        loaded[kind] = model
    return loaded


def reference(folder: Path) -> Any:
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(
        folder, attn_implementation="eager"
    ).eval()


def eager_attentions(folder: Path, ids: torch.Tensor, mask: torch.Tensor) -> tuple[Any, ...]:
    with torch.inference_mode():
        return reference(folder)(  # type: ignore[no-any-return]
            ids, attention_mask=mask, output_attentions=True
        ).attentions


@pytest.mark.parametrize("kind", KINDS)
def test_every_layer_equals_eager_output_attentions(
    models: dict[str, PretrainedModel], folders: dict[str, Path], kind: str
) -> None:
    model = models[kind]
    assert model.attention_path == "output_attentions"
    batch = model.tokenize([LONG, "a dog ran"])  # the second is padded
    result = model.run(batch)
    expected = eager_attentions(folders[kind], batch.input_ids, batch.attention_mask)
    assert result.num_layers("decoder") == len(expected) == 2
    for layer, weights in enumerate(expected):
        torch.testing.assert_close(
            result.layer_weights("decoder", layer), weights, atol=1e-5, rtol=0
        )
        # one query's row in every head, and a head group, slice the same weights
        torch.testing.assert_close(
            result.query_rows("decoder", 3)[layer], weights[:, :, 3], atol=1e-5, rtol=0
        )
    if kind == "gpt_neo":  # the local layer forgets what left its window
        last = result.layer_weights("decoder", 1)[0, :, -1]
        assert float(last[:, : -tiny.SLIDING_WINDOW].abs().max()) == 0.0
        assert float(result.layer_weights("decoder", 0)[0, :, -1, 0].min()) > 0.0


@pytest.mark.parametrize("kind", KINDS)
def test_generation_steps_are_the_models_own(
    models: dict[str, PretrainedModel], folders: dict[str, Path], kind: str
) -> None:
    model = models[kind]
    prompt = model.tokenize(["the cat sat on"])
    generation = model.generate(prompt, 3)
    with torch.inference_mode():
        greedy = reference(folders[kind]).generate(
            prompt.input_ids, attention_mask=prompt.attention_mask, max_new_tokens=3,
            do_sample=False, eos_token_id=None, pad_token_id=0,
        )  # fmt: skip
    assert (
        generation.new_ids
        == greedy[0, prompt.input_ids.shape[1] :].tolist()[: len(generation.new_ids)]
    )
    whole = model.extended(prompt, generation.new_ids)
    expected = eager_attentions(folders[kind], whole.input_ids, whole.attention_mask)
    for step in range(1, len(generation.new_ids)):
        for layer in range(2):
            row = generation.step_row(step, layer, 1)
            position = prompt.input_ids.shape[1] + step - 1
            torch.testing.assert_close(
                row, expected[layer][0, 1, position, : position + 1], atol=1e-5, rtol=0
            )


@pytest.fixture(scope="module")
def client(folders: dict[str, Path]) -> Iterator[Any]:
    with serving_model_dirs([folders[k] for k in KINDS]) as served:
        yield served


@pytest.mark.parametrize("kind", KINDS)
def test_the_api_draws_them_equal_to_eager_and_says_how(
    client: Any, folders: dict[str, Path], kind: str
) -> None:
    info = {m["name"]: m for m in client.get("/api/v1/models").json()["models"]}[kind]
    assert info["state"] == "ready", info
    assert info["attention_path"] == "output_attentions"
    assert "the fused path is not available for this family" in info["attention_note"]
    body = {"model": kind, "texts": [LONG], "sequence_index": 0}
    one = client.post("/api/v1/models/attention", json=body)
    assert one.status_code == 200, one.text
    payload = one.json()
    assert payload["attention_path"] == "output_attentions"
    assert "fused path is not available" in payload["attention_note"]
    ids = torch.tensor(payload["input_ids"])
    expected = eager_attentions(folders[kind], ids, torch.ones_like(ids))
    got = torch.tensor(payload["attentions"])  # (N, 1, H, L, L)
    for layer, weights in enumerate(expected):
        torch.testing.assert_close(got[layer], weights, atol=1e-5, rtol=0)

    batch = client.post("/api/v1/models/attention", json={"model": kind, "texts": [LONG, "a dog"]})
    assert batch.status_code == 200, batch.text
    ids = torch.tensor(batch.json()["input_ids"])
    mask = torch.tensor(batch.json()["attention_mask"]).long()
    expected = eager_attentions(folders[kind], ids, mask)
    got = torch.tensor(batch.json()["attentions"])  # (N, B, H, L, L)
    for layer, weights in enumerate(expected):
        real = mask[:, None, None, :].bool() & mask[:, None, :, None].bool()
        torch.testing.assert_close(got[layer][real.expand_as(got[layer])],
                                   weights[real.expand_as(weights)], atol=1e-5, rtol=0)  # fmt: skip

    norm = client.post("/api/v1/models/attention", json={"model": kind, "texts": [LONG],
                                                         "method": "norm"})  # fmt: skip
    assert norm.status_code == 422 and norm.json()["detail"][0]["loc"][-1] == "method"
    rollout = client.post("/api/v1/models/attention", json={**body, "method": "rollout"})
    assert rollout.status_code == 200, rollout.text
    generated = client.post(
        "/api/v1/models/attention", json={**body, "texts": ["the cat"], "max_new_tokens": 2}
    )
    assert generated.status_code == 200, generated.text
    new = generated.json()["generation"]["ids"]
    assert len(generated.json()["tokens"][0]) == 2 + len(new)  # the pass covers them
    # the grid streamed layer by layer, computed during the pass (a text not run before:
    # no kept recording), equals eager output_attentions
    fresh = {"model": kind, "texts": ["a big red house and a small tree today"],
             "sequence_index": 0, "display_size": 64}  # fmt: skip
    with client.stream("POST", "/api/v1/models/attention/layers", json=fresh) as response:
        assert response.status_code == 200
        lines = [json.loads(line) for line in response.iter_lines() if line]
    start, *layers, end = lines
    assert start["type"] == "start" and end["type"] == "end", end
    assert start["attention_path"] == "output_attentions"
    ids = torch.tensor(start["input_ids"])
    expected = eager_attentions(folders[kind], ids, torch.ones_like(ids))
    assert [line["layer"] for line in layers] == [0, 1]
    for line, weights in zip(layers, expected, strict=True):
        torch.testing.assert_close(torch.tensor(line["attentions"]), weights[0], atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    ("field", "extra"),
    [
        ("method", {"method": "norm"}),
        ("method", {"method": "value_zeroing"}),
        ("method", {"method": "grad_rollout"}),
        ("neuron", {"neuron": True, "layer_index": 0, "head_index": 0, "query_index": 1}),
        ("ablate", {"ablate": [[0, 1]]}),
    ],
)
def test_what_needs_queries_keys_or_values_is_refused_naming_the_field(
    client: Any, field: str, extra: dict[str, Any]
) -> None:
    body = {"model": "gpt_neo", "texts": [LONG], "sequence_index": 0, **extra}
    response = client.post("/api/v1/models/attention", json=body)
    assert response.status_code == 422, response.text
    detail = response.json()["detail"][0]
    assert detail["loc"][-1] == field
    assert "fused path is not available for this family" in detail["msg"]


def test_an_input_whose_weights_would_not_fit_is_refused_before_it_runs(
    models: dict[str, PretrainedModel],
) -> None:
    from attnviz.attention.errors import InputTooLargeError
    from attnviz.pretrained.admission import check_memory, estimate_peak_bytes
    from attnviz.pretrained.lengths import InputLengths

    model = models["gpt_neo"]
    lengths = InputLengths(60)
    needed = estimate_peak_bytes(model, lengths, block="decoder")
    whole = 2 * 4 * 60 * 60 * (4 + 4)  # N x H x L^2, the model's output and the copy kept
    assert needed >= whole
    with pytest.raises(InputTooLargeError, match="memory"):
        check_memory(model, lengths, needed - 1, block="decoder")


def test_a_model_that_returns_no_weights_either_is_refused_naming_why(
    folders: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import transformers

    forward = transformers.BloomModel.forward

    def mute(self: Any, *args: Any, **kwargs: Any) -> Any:
        output = forward(self, *args, **kwargs)
        output.attentions = None
        return output

    monkeypatch.setattr(transformers.BloomModel, "forward", mute)
    with pytest.raises(ModelFormatError, match=r"BloomAttention.*ALiBi.*no decoder weights"):
        load_model_dir("mute", folders["bloom"])
