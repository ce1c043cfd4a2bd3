"""Long inputs hold nothing L x L: masks as rules, averages from block sums, views from tiles.

Past :data:`attnviz.pretrained.mask_rules.DENSE_MASK_CELLS` (2,048 x 2,048) the recorder's
masks are rule-only (no dense values), and past :data:`attnviz.pretrained.display.
FULL_SUM_CELLS` the layer mean is summed at its display size. The tests:

- with every mask rule-only (the bound set to 0), every tiny family's kept tiles and
  recorded weights equal transformers' eager ``output_attentions`` (the reference of
  :mod:`tests.pretrained.test_tiles`), padding, sliding windows, Gemma 3's bidirectional
  blocks, T5's position bias and cross attention included;
- a random Llama of 4,096 positions, from a folder: the streamed grid, the averages, the
  enlarged head, a layer, a token's rows and zoom tiles are made with no tensor of
  4,096**2 numbers anywhere (a dispatch mode fails on one, in every thread; checked to
  fail on one), and they equal the same views computed densely;
- the layer mean of a long input is each block's mean of the layers' head means.
"""

from pathlib import Path
from typing import Any

import pytest
import torch
from attnviz.attention.pooling import block_reduce
from attnviz.pretrained import PretrainedModel, mask_rules
from attnviz.pretrained import display as display_module
from attnviz.pretrained.loading import load_model_dir

from tests.pretrained import tiny
from tests.pretrained.support import (
    SquareBufferError,
    eager_model,
    no_square_buffers,
    require_transformers,
)
from tests.pretrained.test_tiles import LONG, NAMES, as_tiles_give_them, eager_maps
from tests.pretrained.test_tiles import prepared as tiles_prepared

LENGTH = 4096


@pytest.fixture(autouse=True)
def _transformers() -> None:
    require_transformers()


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    require_transformers()
    root = tmp_path_factory.mktemp("tiny-rule-only")
    return {name: tiny.save_tiny(name, root / name) for name in NAMES}


@pytest.mark.parametrize("name", NAMES)
def test_rule_only_masks_give_every_family_its_eager_weights(
    name: str, folders: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every mask rule-only: the kept pass's tiles and a recorded pass's weights of a padded
    batch equal eager attention, and the outputs equal a pass with dense masks."""
    model = load_model_dir(name, folders[name])
    batch = model.tokenize([LONG, "a dog ran"])
    targets = model.decoder_inputs(tiny.TARGETS) if model.family == "encoder-decoder" else None
    dense = model.run(batch, targets, device="cpu")
    monkeypatch.setattr(mask_rules, "DENSE_MASK_CELLS", 0)
    kept = model.run(batch, targets, device="cpu", record=False, keep=True)
    recorded = model.run(batch, targets, device="cpu")
    assert recorded.recording.calls  # a recorded pass: its masks are rule-only
    assert all(
        mask_rules.is_rule_only(call.attention_mask)
        for call in recorded.recording.calls
        if call.attention_mask is not None
    )
    inputs = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask.long()}
    if model.family == "encoder" and model.architecture == "bert":
        inputs["token_type_ids"] = batch.token_type_ids
    if targets is not None:
        inputs["decoder_input_ids"] = targets.input_ids
        inputs["decoder_attention_mask"] = targets.attention_mask.long()
    with torch.inference_mode():
        expected = eager_model(folders[name], model.family)(**inputs, output_attentions=True)
    assert kept.kept is not None
    assert all(layer.refusal is None for layer in kept.kept.layers)
    for block in model.blocks:
        real = recorded.queries(block).attention_mask  # (B, L_q): tokens, not padding
        for layer, weights in enumerate(eager_maps(expected, block)):
            reference = as_tiles_give_them(weights)
            torch.testing.assert_close(kept.tile(block, layer), reference, atol=1e-5, rtol=0)
            got = recorded.layer_weights(block, layer)
            rows = real[:, None, :, None].expand_as(got)  # eager's rows of padding differ
            torch.testing.assert_close(got[rows], weights.float()[rows], atol=1e-5, rtol=0)
    if dense.next_tokens is not None:
        assert kept.next_tokens is not None
        torch.testing.assert_close(
            kept.next_tokens.probabilities, dense.next_tokens.probabilities, atol=1e-5, rtol=0
        )


def test_the_guard_fails_on_a_square_buffer_in_any_thread() -> None:
    """The check the long-input test relies on: an L x L tensor, here or in a thread."""
    import threading

    with pytest.raises(SquareBufferError), no_square_buffers(64):
        torch.zeros(64, 64)
    failures: list[BaseException] = []

    def work() -> None:
        try:
            torch.ones(32, 128).tril()
        except SquareBufferError as error:
            failures.append(error)

    with no_square_buffers(64) as found:
        torch.zeros(63, 64)  # one row short: allowed
        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
    assert len(failures) == 1 and len(found) == 1


@pytest.fixture(scope="module")
def long_llama(tmp_path_factory: pytest.TempPathFactory) -> PretrainedModel:
    require_transformers()
    folder = tmp_path_factory.mktemp("long-llama") / "llama"
    tiny.save_tiny("llama", folder, max_position_embeddings=LENGTH)
    return load_model_dir("llama-4k", folder)


def long_batch(model: PretrainedModel, length: int) -> Any:
    words = (tiny.WORDS * (length // len(tiny.WORDS) + 1))[:length]
    batch = model.tokenize([" ".join(words)])
    assert batch.input_ids.shape == (1, length)
    return batch


def prepared(model: PretrainedModel, batch: Any, cache: Any, **options: Any) -> Any:
    """test_tiles' view plan, with no bound on the length and room for 4,096 tokens."""
    from attnviz.pretrained.analysis import Limits

    limits = Limits(max_seq_len=None, max_weight_cells=10**9, max_request_bytes=2**40)
    return tiles_prepared(model, batch, cache, limits=limits, **options)


def views(model: PretrainedModel, batch: Any, cache: Any) -> dict[str, Any]:
    """The page's views of a long input, in the page's order: the streamed grid first."""
    found: dict[str, Any] = {}
    for name, observe, options in (
        ("grid", True, {"display_size": 64}),
        ("head", False, {"layer_index": 1, "head_index": 2, "display_size": 256}),
        ("layer", False, {"layer_index": 0, "display_size": 64}),
    ):
        walk = prepared(model, batch, cache, observe=observe, **options).walk
        list(walk.layers())
        found[name] = walk.view()
    found["row"] = prepared(model, batch, cache, query_index=LENGTH - 7).query_rows
    return found


def test_a_long_input_s_views_make_no_l_by_l_buffer_and_equal_dense_ones(
    long_llama: PretrainedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """4,096 tokens, a recording cache that keeps the pass for tiles but not its states:
    the streamed grid, its averages, the enlarged head, a layer, a token's rows and zoom
    tiles make no tensor of L x L numbers; each equals the same view with dense masks and
    full-size sums (the bounds raised), to 1e-5."""
    from attnviz.pretrained.admission import kept_bytes, recording_bytes
    from attnviz.pretrained.lengths import InputLengths
    from attnviz.pretrained.recordings import RecordingCache

    model = long_llama
    batch = long_batch(model, LENGTH)
    lengths = InputLengths(source=LENGTH)
    room = (kept_bytes(model, lengths) + recording_bytes(model, lengths)) // 2
    cache = RecordingCache(room)  # the kept pass fits, the recorded states do not
    with torch.inference_mode(), no_square_buffers(LENGTH) as found:
        got = views(model, batch, cache)
        key = cache.pass_key(model, batch.select(0), device="cpu")
        assert key is not None
        found_pass = cache.by_pass_key(key)
        assert found_pass is not None
        kept = found_pass[1]
        assert kept.tiles_only  # the kept pass, not the recorded states
        whole = kept.tile(
            "decoder", 1, rows=range(0, LENGTH), cols=range(0, LENGTH), factor=(16, 16)
        )
        deepest = kept.tile("decoder", 1, rows=range(3840, 4096), cols=range(3584, 3840))
    assert found == []
    assert got["grid"].average_pooling.method == "mean"  # summed at its display size
    monkeypatch.setattr(mask_rules, "DENSE_MASK_CELLS", LENGTH * LENGTH)
    monkeypatch.setattr(display_module, "FULL_SUM_CELLS", LENGTH * LENGTH)
    with torch.inference_mode():
        dense = model.run(batch, device="cpu")  # recorded: eager attention's weights
        want = views(model, batch, RecordingCache(2**34))
    for name in ("grid", "head", "layer"):
        torch.testing.assert_close(got[name].attentions, want[name].attentions, atol=1e-5, rtol=0)
        torch.testing.assert_close(got[name].head_mean, want[name].head_mean, atol=1e-5, rtol=0)
    torch.testing.assert_close(got["row"], want["row"], atol=1e-5, rtol=0)
    layer_1 = dense.layer_weights("decoder", 1)
    torch.testing.assert_close(whole, block_reduce(layer_1, 16, 16, "max"), atol=1e-5, rtol=0)
    torch.testing.assert_close(deepest, layer_1[..., 3840:, 3584:3840], atol=1e-5, rtol=0)
    # The layer mean: each block's mean of every layer's head mean (no L x L sum).
    factor = got["grid"].average_pooling.factor
    mean = sum(dense.layer_weights("decoder", n).mean(dim=1)[0] for n in range(model.num_layers))
    mean = mean / model.num_layers
    torch.testing.assert_close(
        got["grid"].layer_mean, block_reduce(mean, factor, factor, "mean"), atol=1e-6, rtol=0
    )
