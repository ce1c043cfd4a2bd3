"""A transformers model the user loaded in Python, handed to AttnViz's views and server.

The model is recorded where it lies, in its own dtype, without a copy: ``wrap_model``
returns a wrapper around the same object, ``attnviz.show`` draws it, and ``create_app``
serves it beside the configured models. A model spread by accelerate over the CPU and
the disk (``device_map`` with ``max_memory`` and an offload folder) works the same way.
"""

from pathlib import Path
from typing import Any

import pytest
import torch
from attnviz import show
from attnviz.attention import AttentionInputError
from attnviz.pretrained import MODELS, ModelFormatError, wrap_model

from tests.pretrained import tiny
from tests.pretrained.support import require_transformers
from tests.server.support import serving

TEXT = "the cat sat on the mat because it was tired"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_transformers()
    return tiny.save_tiny("llama", tmp_path_factory.mktemp("own") / "llama")


def loaded(folder: Path, **options: Any) -> tuple[Any, Any]:
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, **options)
    return model, transformers.AutoTokenizer.from_pretrained(folder)


def eager(folder: Path, ids: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    import transformers

    reference = transformers.AutoModelForCausalLM.from_pretrained(
        folder, attn_implementation="eager", dtype=dtype
    ).eval()
    with torch.inference_mode():
        return reference(ids, output_attentions=True).attentions  # type: ignore[no-any-return]


def test_a_model_loaded_in_python_is_recorded_as_it_is(folder: Path) -> None:
    model, tokenizer = loaded(folder, dtype=torch.bfloat16)
    wrapped = wrap_model(model, tokenizer, name="mine")
    assert wrapped.model is model  # not copied
    assert wrapped.dtype == torch.bfloat16 and wrapped.family == "decoder"
    result = wrapped.attention([TEXT])
    expected = eager(folder, result.batch.input_ids, torch.bfloat16)
    for layer, weights in enumerate(expected):
        torch.testing.assert_close(
            result.layer_weights("decoder", layer), weights.float(), atol=2e-2, rtol=0
        )
    view = show(TEXT, model, tokenizer=tokenizer, layer=1)  # the notebook view, same model
    assert view.maps.shape[-1] == result.batch.input_ids.shape[1]
    with pytest.raises(AttentionInputError, match="tokenizer"):
        show(TEXT, model)
    with pytest.raises(AttentionInputError, match="placed by the caller"):
        wrapped.on(torch.device("meta"))  # another device: it has no files to load from


def test_a_model_spread_by_accelerate_is_served_where_it_lies(folder: Path, tmp_path: Path) -> None:
    model, tokenizer = loaded(
        folder,
        dtype=torch.float32,
        device_map="auto",
        max_memory={"cpu": 30_000},
        offload_folder=str(tmp_path / "offload"),
    )
    wrapped = wrap_model(model, tokenizer, name="spread")
    assert wrapped.placed and "disk" in wrapped.layers_per_device()
    with serving({"ATTNVIZ_PACKAGED_MODELS": "[]"}, models=[wrapped]) as client:
        info = client.get("/api/v1/models").json()["models"]
        assert [m["name"] for m in info] == ["spread"] and info[0]["state"] == "ready"
        assert info[0]["layers_per_device"] == wrapped.layers_per_device()
        data = client.post(
            "/api/v1/models/attention", json={"model": "spread", "texts": [TEXT]}
        ).json()
    got = torch.tensor(data["attentions"])[:, 0]
    expected = eager(folder, torch.tensor([data["input_ids"][0]]), torch.float32)
    torch.testing.assert_close(got, torch.stack(expected)[:, 0], atol=1e-4, rtol=0)
    assert MODELS.entries() == []  # the app's lifespan ended: the registry is cleared


def test_speech_and_image_models_are_loaded_from_their_directory() -> None:
    require_transformers()
    import transformers

    vit = transformers.ViTModel(
        transformers.ViTConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=16, image_size=8, patch_size=4)
    )  # fmt: skip
    with pytest.raises(ModelFormatError, match="from its directory"):
        wrap_model(vit, None)


def test_two_models_of_one_name_are_refused(folder: Path) -> None:
    from attnviz.pretrained import ModelRegistry

    registry = ModelRegistry()
    registry.configure([], packaged=[])
    model, tokenizer = loaded(folder)
    registry.add(wrap_model(model, tokenizer, name="same"))
    with pytest.raises(ModelFormatError, match="two models are named 'same'"):
        registry.add(wrap_model(model, tokenizer, name="same"))
