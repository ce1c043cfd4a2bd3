"""Models loaded in their own dtype and placed by accelerate: settings, dtype, disk offload.

The maps of a model loaded in bfloat16 equal transformers' eager bfloat16
``output_attentions`` to 2e-2; those of a model spread over the CPU and the disk by
accelerate (``max_memory`` + ``offload_folder``) equal eager float32 to 1e-4.
"""

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from attnviz.attention import AttentionInputError
from attnviz.pretrained.loading import load_model_dir
from attnviz.pretrained.placement import (
    Placement,
    PlacementError,
    layer_modules,
    layers_per_device,
    module_devices,
)
from attnviz.server.settings import Settings
from pydantic import ValidationError

from tests.pretrained import tiny
from tests.pretrained.support import eager_model, require_transformers


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    require_transformers()
    root = tmp_path_factory.mktemp("tiny-placed")
    return {name: tiny.save_tiny(name, root / name) for name in ("llama", "bert", "t5", "gpt2")}


def eager_attentions(folder: Path, family: str, dtype: torch.dtype, inputs: dict[str, Any]) -> Any:
    """transformers' own eager ``output_attentions`` of ``folder`` in ``dtype``."""
    model = eager_model(folder, family, dtype)
    with torch.inference_mode():
        return model(**inputs, output_attentions=True)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"dtype": "float64"}, "ATTNVIZ_DTYPE"),
        ({"device_map": "gpu"}, "ATTNVIZ_DEVICE_MAP"),
        ({"device_map": "{not json"}, "ATTNVIZ_DEVICE_MAP: not JSON"),
        ({"device_map": '{"model.layers": "tpu"}'}, "'tpu' is not a device"),
        ({"device_map": "[]"}, "ATTNVIZ_DEVICE_MAP"),
        ({"max_memory": '{"cpu": "lots"}'}, "'lots' is not a size"),
        ({"max_memory": '{"gpu0": "1GiB"}'}, "ATTNVIZ_MAX_MEMORY"),
        ({"max_memory": "{}"}, "non-empty"),
    ],
)
def test_a_placement_setting_that_cannot_be_used_is_refused_naming_it(
    settings: dict[str, str], message: str
) -> None:
    with pytest.raises(PlacementError, match=message.replace("[", r"\[")):
        Placement(**settings).check()  # type: ignore[arg-type]
    (name,) = settings
    with pytest.raises(ValidationError, match=f"(?m)^{name}$|ATTNVIZ_{name.upper()}"):
        Settings(**settings)  # type: ignore[arg-type]


def test_placement_settings_become_from_pretrained_options(tmp_path: Path) -> None:
    config = type("Config", (), {"dtype": torch.bfloat16})()
    placement = Placement(
        max_memory='{"cuda:1": "70GiB", "cpu": 1000000}', offload_dir=tmp_path / "off"
    ).check()
    options = placement.loading_options(config)
    assert options["device_map"] == "auto"  # a memory cap alone implies accelerate's map
    assert options["max_memory"] == {1: "70GiB", "cpu": 1000000}  # GPUs as ints
    assert options["offload_folder"] == str(tmp_path / "off")
    assert options["dtype"] == torch.bfloat16  # the checkpoint's dtype: a GPU is named
    assert Placement(device_map='{"model": "cuda:0", "lm_head": 0}').parsed_device_map() == {
        "model": 0,
        "lm_head": 0,
    }
    assert Placement(device_map="1").parsed_device_map() == "cuda:1"
    on_cpu = Placement(device_map="cpu")
    assert on_cpu.torch_dtype(config) == torch.float32  # auto: float32 on the CPU
    assert Placement(dtype="float16").torch_dtype(config) == torch.float16
    assert Settings(dtype="bfloat16", device_map="auto").placement().dtype == "bfloat16"


@pytest.mark.parametrize("name", ["llama", "bert", "t5"])
def test_a_model_loaded_in_bfloat16_draws_eager_bfloat16_attentions(
    folders: dict[str, Path], name: str
) -> None:
    model = load_model_dir(name, folders[name], placement=Placement(dtype="bfloat16"))
    full = load_model_dir(name, folders[name], placement=Placement(dtype="float32"))
    assert model.dtype == torch.bfloat16 and full.dtype == torch.float32
    assert model.parameter_bytes * 2 == full.parameter_bytes
    batch = model.tokenize(tiny.TEXTS)
    targets = model.decoder_inputs(tiny.TARGETS) if model.family == "encoder-decoder" else None
    result = model.run(batch, targets, device="auto")
    inputs: dict[str, Any] = {
        "input_ids": batch.input_ids,
        "attention_mask": batch.attention_mask.long(),
    }
    if targets is not None:
        inputs["decoder_input_ids"] = targets.input_ids
        inputs["decoder_attention_mask"] = targets.attention_mask.long()
    expected = eager_attentions(folders[name], model.family, torch.bfloat16, inputs)
    reference = expected.encoder_attentions if targets is not None else expected.attentions
    for layer, weights in enumerate(reference):
        ours = result.layer_weights(result.first_block, layer)
        assert ours.dtype == torch.float32
        torch.testing.assert_close(ours, weights.float(), atol=2e-2, rtol=0)
        # bfloat16 rows still sum to 1 within its precision
        torch.testing.assert_close(ours.sum(-1), torch.ones(ours.shape[:-1]), atol=2e-2, rtol=0)
    if model.family == "decoder":
        top = result.next_tokens
        assert top is not None and torch.all(top.probabilities[..., 0] <= 1)


def test_a_model_offloaded_to_disk_runs_where_it_lies_and_draws_eager_attentions(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    folder = folders["llama"]
    base = load_model_dir("llama", folder, placement=Placement(dtype="float32"))
    # Room for about one transformer block on the CPU: the rest goes to disk.
    block_bytes = sum(p.numel() * 4 for p in layer_modules(base.model)[0][1].parameters())
    embed_bytes = base.model.get_input_embeddings().weight.numel() * 4
    cap = embed_bytes * 2 + block_bytes + 4096
    placement = Placement(
        dtype="float32", max_memory=json.dumps({"cpu": cap}), offload_dir=tmp_path / "offload"
    )
    placed = load_model_dir("llama", folder, placement=placement)
    where = placed.layers_per_device()
    assert where.get("disk", 0) >= 1 and sum(where.values()) == base.num_layers, where
    assert layers_per_device(base.model) == {"cpu": base.num_layers}
    assert placed.placed and not base.placed
    # A block on disk holds no weights in memory: accelerate reads them (from the
    # checkpoint's safetensors) as the pass reaches the block.
    on_disk = [n for n, d in module_devices(placed.model).items() if d == "disk"]
    block = dict(layer_modules(placed.model))[on_disk[0]]
    assert all(p.device.type == "meta" for p in block.parameters())
    batch = placed.tokenize(tiny.TEXTS)
    result = placed.run(batch, device="auto")
    expected = eager_attentions(
        folder,
        "decoder",
        torch.float32,
        {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask.long()},
    )
    for layer, weights in enumerate(expected.attentions):
        torch.testing.assert_close(
            result.layer_weights("decoder", layer), weights, atol=1e-4, rtol=0
        )
    assert placed.device_for("cpu") == torch.device("cpu")  # where it lies


def test_a_placed_model_refuses_another_device_and_a_single_one_loads_a_copy(
    folders: dict[str, Path],
) -> None:
    model = load_model_dir("gpt2", folders["gpt2"])
    assert not model.placed and model.device_for("auto") == model.home
    # As on a GPU machine whose model a device map placed on cuda:0 and cuda:1.
    model.__dict__["home"] = torch.device("cuda:0")
    model.placement = Placement(device_map="auto")
    with pytest.raises(AttentionInputError, match="runs where it lies") as refused:
        model.device_for("cpu")
    assert refused.value.field == "device"
    # Not placed: a request for another device gets the model loaded there (once).
    model.placement = Placement()
    copy_on_cpu = model.on(torch.device("cpu"))
    assert copy_on_cpu is not model.model and copy_on_cpu is model.on(torch.device("cpu"))
    assert copy_on_cpu.config._attn_implementation == model.model.config._attn_implementation
    model.reload = None  # a model handed over from Python has no files to load from
    model._copies.clear()
    with pytest.raises(AttentionInputError, match="placed by the caller"):
        model.on(torch.device("cpu"))
