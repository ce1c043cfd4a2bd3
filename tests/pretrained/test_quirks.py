"""Each family's attention quirks, reproduced: every map equals transformers' eager attention.

Tiny random decoders (:data:`tests.pretrained.tiny.QUIRKS`): Gemma 2 (logit soft-capping,
query_pre_attn_scalar scaling, sliding and global layers), Gemma 3 (multi-query heads,
sliding and global layers), gpt-oss (learned attention sinks, sliding layers), Granite
(attention_multiplier scaling), Qwen2 (a sliding window from one layer on). For each, on an
input longer than the window with padding in the batch:

* the model's output (next-token logits) equals eager attention's: the layers SDPA cannot
  compute (a softcap, sinks) run the model's own eager attention;
* every head of every layer of a recorded pass equals eager ``output_attentions`` to 1e-5;
* the grid computed during the pass (observed, in chunks of rows) equals the grid walked
  from the recording;
* the pass recorded while generating equals one causal pass.

Models whose attention does not go through the attention interface (BLOOM's ALiBi,
GPT-Neo) are drawn from their eager output_attentions: tests/pretrained/test_own_attention.py.
"""

from pathlib import Path
from typing import Any

import pytest
import torch
from attnviz.pretrained import PretrainedModel
from attnviz.pretrained import computing as computing_module
from attnviz.pretrained.display import LayerWalk
from attnviz.pretrained.loading import load_model_dir

from tests.pretrained import tiny
from tests.pretrained.support import eager_model, require_transformers

LONG = "the cat sat on the mat because it was tired and the dog ran to the park"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[PretrainedModel, Path]]:
    require_transformers()
    root = tmp_path_factory.mktemp("tiny-quirks")
    found = {}
    for name in tiny.QUIRKS:
        folder = tiny.save_tiny(name, root / name)
        found[name] = (load_model_dir(name, folder), folder)
    return found


def eager_reference(folder: Path) -> Any:
    return eager_model(folder)


@pytest.mark.parametrize("name", list(tiny.QUIRKS))
def test_every_head_and_the_output_equal_eager_attention(
    models: dict[str, tuple[PretrainedModel, Path]], name: str
) -> None:
    model, folder = models[name]
    batch = model.tokenize([LONG, "a dog ran"])  # longer than the window; one padded
    assert batch.input_ids.shape[1] > tiny.SLIDING_WINDOW
    result = model.run(batch)
    with torch.inference_mode():
        expected = eager_reference(folder)(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask.long(),
            output_attentions=True,
        )
        ours = model.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask.long())
    real = batch.attention_mask
    torch.testing.assert_close(ours.logits[real], expected.logits[real], atol=1e-4, rtol=1e-4)
    for layer, weights in enumerate(expected.attentions):
        got = result.layer_weights("decoder", layer)
        for b, length in enumerate(batch.lengths):
            torch.testing.assert_close(
                got[b, :, :length, :length], weights[b, :, :length, :length], atol=1e-5, rtol=0
            )
    top = result.next_tokens  # the model's own head, its final softcapping included
    assert top is not None
    assert torch.equal(
        top.ids[0, : batch.lengths[0], 0], expected.logits[0, : batch.lengths[0]].argmax(-1)
    )


@pytest.mark.parametrize("name", list(tiny.QUIRKS))
def test_the_quirks_show_in_the_maps(
    models: dict[str, tuple[PretrainedModel, Path]], name: str
) -> None:
    """The quirk really acts: the weights differ from plain scaled softmax attention."""
    model, _ = models[name]
    result = model.run(model.tokenize([LONG]))
    last_layer = model.num_layers - 1  # global with a softcap, scaling or sinks; or sliding
    call = result.recording.calls[last_layer]
    weights = result.layer_weights("decoder", last_layer)[0]  # (H, L, L)
    key = call.key[0].repeat_interleave(call.group_size, dim=0)
    plain = (call.query[0] @ key.transpose(-1, -2)) * call.query.shape[-1] ** -0.5
    causal = torch.ones(plain.shape[-2:], dtype=torch.bool).tril()
    plain = plain.masked_fill(~causal, float("-inf")).softmax(-1)
    assert float((weights - plain).abs().max()) > 1e-3
    rows = weights.sum(-1)
    if name == "gpt_oss":  # the sinks take a share of every row
        assert float(rows.max()) < 1 - 1e-3
    else:
        torch.testing.assert_close(rows, torch.ones_like(rows), atol=1e-5, rtol=0)
    window = getattr(model.config, "sliding_window", None)
    sliding = [
        i
        for i, kind in enumerate(getattr(model.config, "layer_types", None) or [])
        if kind == "sliding_attention"
    ]
    for layer in sliding:
        maps = result.layer_weights("decoder", layer)[0]
        last = maps.shape[-1] - 1
        assert window is not None and float(maps[:, last, : last - window + 1].sum()) == 0.0


@pytest.mark.parametrize("name", list(tiny.QUIRKS))
def test_the_observed_grid_equals_the_recorded_one(
    models: dict[str, tuple[PretrainedModel, Path]], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(computing_module, "OBSERVED_CHUNK_FLOATS", 200)  # a few rows a chunk
    model, _ = models[name]
    batch = model.tokenize([LONG])
    recorded = model.run(batch)
    expected = LayerWalk(recorded, display_size=5)
    want = list(expected.layers())

    def run(observer: Any) -> Any:
        return model.run(batch, observer=observer, record=False)

    walk = LayerWalk(recorded, display_size=5, pending=run, block_of=model.block_of(model.model))
    got = list(walk.layers())
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a.attentions, b.attentions, atol=1e-5, rtol=0)
        torch.testing.assert_close(a.head_mean, b.head_mean, atol=1e-5, rtol=0)
    torch.testing.assert_close(walk.view().rollout, expected.view().rollout, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", list(tiny.QUIRKS))
def test_the_pass_recorded_while_generating_equals_one_causal_pass(
    models: dict[str, tuple[PretrainedModel, Path]], name: str
) -> None:
    model, _ = models[name]
    prompt = model.tokenize([LONG])
    generation = model.generate(prompt, 4, record_steps=False, record_pass=True)
    assert generation.result is not None
    whole = model.run(model.extended(prompt, generation.new_ids))
    for layer in range(model.num_layers):
        torch.testing.assert_close(
            generation.result.layer_weights("decoder", layer),
            whole.layer_weights("decoder", layer),
            atol=1e-5,
            rtol=0,
        )
