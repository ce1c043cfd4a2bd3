"""Exact tiles from a kept pass (q, k, each row's log-sum-exp): every family equals eager.

The reference is transformers' own model of the same folder, loaded apart with eager
attention, and its ``output_attentions``: for every tiny family (encoders, decoders,
encoder-decoders with cross attention, and the quirks: softcap, sinks, sliding windows,
multi-query heads, other scalings, T5's position bias), on a padded batch, every layer's
tile at factor 1 equals the eager weights to 1e-5, pooled tiles (block max and block
mean, partial blocks, offset tiles) equal the eager weights pooled, and a tile computed in
many small chunks equals one computed whole.
"""

from pathlib import Path
from typing import Any

import pytest
import torch
from attnviz.attention.errors import AttentionInputError
from attnviz.attention.pooling import block_reduce
from attnviz.pretrained import PretrainedModel
from attnviz.pretrained import tiles as tiles_module
from attnviz.pretrained.loading import load_model_dir
from attnviz.pretrained.results import PretrainedAttentions
from attnviz.pretrained.tiles import TileError

from tests.pretrained import tiny
from tests.pretrained.support import eager_model, require_transformers

LONG = "the cat sat on the mat because it was tired and the dog ran to the park"
NAMES = [*tiny.BUILDERS, *tiny.QUIRKS]


@pytest.fixture(autouse=True)
def _transformers() -> None:
    require_transformers()


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    require_transformers()
    root = tmp_path_factory.mktemp("tiny-tiles")
    return {name: tiny.save_tiny(name, root / name) for name in [*NAMES, *tiny.OWN_ATTENTION]}


@pytest.fixture(scope="module")
def models(folders: dict[str, Path]) -> dict[str, PretrainedModel]:
    return {name: load_model_dir(name, folders[name]) for name in NAMES}


@pytest.fixture(scope="module")
def passes(
    models: dict[str, PretrainedModel], folders: dict[str, Path]
) -> dict[str, tuple[PretrainedAttentions, Any]]:
    """Each model's kept pass of a padded batch, and the eager reference's outputs."""
    found = {}
    for name, model in models.items():
        batch = model.tokenize([LONG, "a dog ran"])
        targets = model.decoder_inputs(tiny.TARGETS) if model.family == "encoder-decoder" else None
        result = model.run(batch, targets, device="cpu", record=False, keep=True)
        inputs = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask.long()}
        if model.family == "encoder" and model.architecture == "bert":
            inputs["token_type_ids"] = batch.token_type_ids
        if targets is not None:
            inputs["decoder_input_ids"] = targets.input_ids
            inputs["decoder_attention_mask"] = targets.attention_mask.long()
        with torch.inference_mode():
            expected = eager_model(folders[name], model.family)(**inputs, output_attentions=True)
        found[name] = (result, expected)
    return found


def eager_maps(expected: Any, block: str) -> tuple[torch.Tensor, ...]:
    if hasattr(expected, "encoder_attentions"):
        return {  # type: ignore[no-any-return]
            "encoder": expected.encoder_attentions,
            "decoder": expected.decoder_attentions,
            "cross": expected.cross_attentions,
        }[block]
    return expected.attentions  # type: ignore[no-any-return]


def real_rows(result: PretrainedAttentions, block: str) -> torch.Tensor:
    """(B, L_q) bool: the query rows that are tokens, not padding."""
    return result.queries(block).attention_mask


def as_tiles_give_them(maps: torch.Tensor) -> torch.Tensor:
    """Eager (B, H, L_q, L_k) maps with the rows that see no key set to 0, as tiles give them.

    Eager attention adds the dtype's lowest value to every hidden key, so a row that sees
    none (a padding query outside a sliding window) comes out even over every key; every
    other row is the softmax tiles reproduce, padding query rows included.
    """
    maps = maps.float()
    even = (maps.amax(-1) == maps.amin(-1)) & (maps.shape[-1] > 1)
    return maps.masked_fill(even[..., None], 0.0)


@pytest.mark.parametrize("name", NAMES)
def test_every_tile_equals_eager_attention_at_factor_1_and_pooled(
    name: str,
    passes: dict[str, tuple[PretrainedAttentions, Any]],
    models: dict[str, PretrainedModel],
) -> None:
    result, expected = passes[name]
    model = models[name]
    assert result.kept is not None
    assert all(layer.refusal is None for layer in result.kept.layers)
    for block in model.blocks:
        for layer, weights in enumerate(eager_maps(expected, block)):
            reference = as_tiles_give_them(weights)
            got = result.tile(block, layer)
            assert got.shape == reference.shape
            torch.testing.assert_close(got, reference, atol=1e-5, rtol=0)
            for factor in ((3, 2), (4, 4), (1, 5)):
                for reduce in ("max", "mean"):
                    pooled = result.tile(block, layer, reduce=reduce, factor=factor)
                    want = block_reduce(reference, *factor, reduce)
                    torch.testing.assert_close(pooled, want, atol=1e-5, rtol=0)
            # An offset tile of some heads, in another order, is that part of the map.
            length_q, length_k = reference.shape[-2:]
            rows, cols = range(1, length_q), range(length_k // 2, length_k)
            heads = [model.num_heads - 1, 0]
            part = result.tile(block, layer, heads=heads, rows=rows, cols=cols)
            torch.testing.assert_close(
                part, reference[:, heads][:, :, 1:, length_k // 2 :], atol=1e-5, rtol=0
            )


@pytest.mark.parametrize("name", ["llama", "gemma2", "gpt_oss", "t5", "bart"])
def test_a_tile_in_many_small_chunks_equals_one_computed_whole(
    name: str,
    passes: dict[str, tuple[PretrainedAttentions, Any]],
    models: dict[str, PretrainedModel],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result, _ = passes[name]
    block = models[name].blocks[-1]
    whole = [result.tile(block, 0, reduce=r, factor=(2, 3)) for r in ("max", "mean")]
    monkeypatch.setattr(tiles_module, "TILE_FLOATS", 40)  # a few cells a chunk
    chunked = [result.tile(block, 0, reduce=r, factor=(2, 3)) for r in ("max", "mean")]
    for a, b in zip(whole, chunked, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", ["llama", "qwen2", "bert", "gemma3_text"])
def test_rows_sum_to_one_and_the_kept_pass_holds_nothing_l_by_l(
    name: str,
    passes: dict[str, tuple[PretrainedAttentions, Any]],
    models: dict[str, PretrainedModel],
) -> None:
    result, _ = passes[name]
    block = models[name].blocks[0]
    real = real_rows(result, block)
    weights = result.tile(block, 0)
    sums = weights.sum(-1)[real[:, None, :].expand(-1, weights.shape[1], -1)]
    torch.testing.assert_close(sums, torch.ones_like(sums), atol=1e-5, rtol=0)
    assert result.kept is not None
    for layer in result.kept.layers:  # the mask is a rule: no dense mask, no value states
        assert layer.rule is not None and layer.dense_mask is None
    q_k_lse = sum(
        t.untyped_storage().nbytes()
        for layer in result.kept.layers
        for t in {id(x): x for x in (layer.query, layer.key, layer.lse)}.values()
    )
    assert result.kept.nbytes <= q_k_lse


def test_sinks_take_their_share_of_every_row(
    passes: dict[str, tuple[PretrainedAttentions, Any]],
) -> None:
    result, _ = passes["gpt_oss"]
    weights = result.tile("decoder", 1)[0]  # the global layer, input 0 (not padded)
    assert float(weights.sum(-1).max()) < 1 - 1e-3


@pytest.mark.parametrize("name", ["llama", "gemma2", "bert"])
def test_the_kept_pass_computes_the_same_outputs(
    name: str, models: dict[str, PretrainedModel]
) -> None:
    """Keeping (the CPU flash kernel with its LSE, or eager and a recomputed LSE) changes
    nothing the model computes: the last hidden states equal a plain pass's."""
    model = models[name]
    batch = model.tokenize([LONG, "a dog ran"])
    real = batch.attention_mask
    plain = model.run(batch, record=False)
    kept = model.run(batch, record=False, keep=True)
    if model.family == "encoder":
        assert plain.final_hidden is not None and kept.final_hidden is not None
        torch.testing.assert_close(
            kept.final_hidden[real], plain.final_hidden[real], atol=1e-5, rtol=0
        )
    else:
        assert plain.decoder_head is not None and kept.decoder_head is not None
        torch.testing.assert_close(
            kept.decoder_head.hidden[real], plain.decoder_head.hidden[real], atol=1e-5, rtol=0
        )


def test_an_attention_whose_scores_tiles_do_not_know_is_refused_by_name(
    models: dict[str, PretrainedModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A family whose eager attention adds a term of its own (here a linear position bias,
    as ALiBi's) is kept with a refusal naming its class; its tiles raise it."""
    import transformers.models.llama.modeling_llama as modeling

    original = modeling.eager_attention_forward

    def with_a_bias(module: Any, query: Any, key: Any, value: Any, mask: Any, **kwargs: Any) -> Any:
        bias = -0.5 * torch.arange(key.shape[-2], dtype=query.dtype)
        mask = bias if mask is None else mask + bias
        return original(module, query, key, value, mask, **kwargs)

    monkeypatch.setattr(modeling, "eager_attention_forward", with_a_bias)
    model = models["llama"]
    result = model.run(model.tokenize([LONG]), record=False, keep=True)
    with pytest.raises(TileError, match="LlamaAttention: AttnViz's tiles do not reproduce"):
        result.tile("decoder", 0)


def test_a_model_whose_modules_compute_attention_themselves_cannot_be_kept(
    folders: dict[str, Path],
) -> None:
    model = load_model_dir("bloom", folders["bloom"])
    with pytest.raises(TileError, match=r"BloomAttention.*ALiBi"):
        model.run(model.tokenize([LONG]), record=False, keep=True)


def test_tiles_refuse_what_is_not_in_the_map(
    passes: dict[str, tuple[PretrainedAttentions, Any]],
) -> None:
    result, _ = passes["llama"]
    length = int(result.batch.input_ids.shape[1])
    with pytest.raises(AttentionInputError, match="layer_index: 2 is not below 2"):
        result.tile("decoder", 2)
    with pytest.raises(IndexError, match=r"heads \[4\] are not in 0..3"):
        result.tile("decoder", 0, heads=[4])
    with pytest.raises(IndexError, match="rows"):
        result.tile("decoder", 0, rows=range(0, length + 1))
    with pytest.raises(ValueError, match="at least 1"):
        result.tile("decoder", 0, factor=(0, 1))
    unkept = result.__class__(**{**result.__dict__, "kept": None})
    with pytest.raises(TileError, match="keep=True"):
        unkept.tile("decoder", 0)


def walked(prepared: Any) -> Any:
    """Run a prepared view's walk to its end; its layers' maps and the whole view."""
    layers = list(prepared.walk.layers())
    return layers, prepared.walk.view()


def counted_runs(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The keyword arguments of every forward pass (PretrainedModel.run) from now on."""
    runs: list[dict[str, Any]] = []
    run = PretrainedModel.run

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        runs.append(kwargs)
        return run(self, *args, **kwargs)

    monkeypatch.setattr(PretrainedModel, "run", counted)
    return runs


def prepared(
    model: PretrainedModel,
    batch: Any,
    cache: Any,
    *,
    observe: bool = False,
    limits: Any = None,
    **options: Any,
) -> Any:
    """The view plan of input 0 of ``batch`` on the CPU with ``options``, through ``cache``,
    run; ``limits`` default 64 tokens, 10**8 numbers and 2 GiB."""
    from attnviz.pretrained.analysis import Limits, ViewOptions
    from attnviz.pretrained.view_plan import plan_view

    if limits is None:
        limits = Limits(max_seq_len=64, max_weight_cells=10**8, max_request_bytes=2**31)
    chosen = ViewOptions(sequence_index=0, device="cpu", **options)
    plan = plan_view(model, chosen, batch, None, "decoder", limits, cache, observe=observe)
    return plan.run()


def test_views_after_a_grid_are_tiles_of_its_kept_pass_with_no_forward_pass(
    folders: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recording cache too small for the recorded states but not for the kept pass: the
    streamed grid keeps its pass for tiles, and the enlarged head, a layer and a token's
    rows are its tiles (no forward pass), equal to the same views of a recorded pass, and
    so is the neuron view (q, k and the row's LSE); the norm method, which needs the value
    states, runs the pass again."""
    from attnviz.pretrained.admission import kept_bytes, recording_bytes
    from attnviz.pretrained.lengths import InputLengths
    from attnviz.pretrained.recordings import RecordingCache

    model = load_model_dir("llama", folders["llama"])
    batch = model.tokenize([LONG])
    lengths = InputLengths(source=int(batch.input_ids.shape[1]))
    small, large = kept_bytes(model, lengths), recording_bytes(model, lengths)
    assert small < large
    runs = counted_runs(monkeypatch)

    def view(cache: RecordingCache, observe: bool = False, **options: Any) -> Any:
        return walked(prepared(model, batch, cache, observe=observe, **options))

    cache = RecordingCache(large - 1)  # the states are not recorded; the kept pass fits
    _, grid = view(cache, observe=True, display_size=5)
    assert [r.get("keep") for r in runs] == [True] and runs[0].get("record") is False
    reference = RecordingCache(10 * large)  # everything recorded: the views replay eager attention
    _, want_grid = view(reference, display_size=5)
    torch.testing.assert_close(grid.attentions, want_grid.attentions, atol=1e-5, rtol=0)
    torch.testing.assert_close(grid.layer_mean, want_grid.layer_mean, atol=1e-5, rtol=0)
    assert grid.rollout is not None and want_grid.rollout is not None
    torch.testing.assert_close(grid.rollout, want_grid.rollout, atol=1e-5, rtol=0)
    runs.clear()
    for options in ({"layer_index": 1, "head_index": 3}, {"layer_index": 0}, {"query_index": 4}):
        _, got = view(cache, **options)
        _, want = view(reference, **options)
        torch.testing.assert_close(got.attentions, want.attentions, atol=1e-5, rtol=0)
        torch.testing.assert_close(got.head_mean, want.head_mean, atol=1e-5, rtol=0)
    assert runs == []  # every view of the kept pass: tiles, no forward pass
    rows = prepared(model, batch, cache, query_index=4).query_rows
    want_rows = prepared(model, batch, reference, query_index=4).query_rows
    assert rows is not None and want_rows is not None
    torch.testing.assert_close(rows, want_rows, atol=1e-5, rtol=0)
    assert runs == []
    neuron = dict(layer_index=1, head_index=0, query_index=4, neuron=True)
    step = prepared(model, batch, cache, **neuron).neuron
    want_step = prepared(model, batch, reference, **neuron).neuron
    assert runs == [] and step is not None and want_step is not None
    torch.testing.assert_close(step.weights, want_step.weights, atol=1e-6, rtol=0)
    prepared(model, batch, cache, layer_index=1, method="norm")
    assert len(runs) == 1 and runs[0].get("keep") is not True  # recorded: the value states


@pytest.mark.parametrize("name", NAMES)
def test_the_neuron_view_of_a_pass_kept_for_tiles_is_the_recorded_one(
    name: str, models: dict[str, PretrainedModel], passes: dict[str, tuple[Any, Any]]
) -> None:
    """The neuron view of a pass kept for tiles (no recorded states) reads its q, k and
    the row's LSE: the same q, keys, scores, scaling and mask as the recorded pass's
    view, and weights equal to it (1e-6) and to transformers' eager attention (1e-5), in
    every block of every family (first and last head and row of every layer)."""
    model = models[name]
    kept, expected = passes[name]
    assert kept.tiles_only
    batch = model.tokenize([LONG, "a dog ran"])
    targets = model.decoder_inputs(tiny.TARGETS) if model.family == "encoder-decoder" else None
    recorded = model.run(batch, targets, device="cpu")
    assert not recorded.tiles_only
    for block, calls in kept.block_calls.items():
        eager = eager_maps(expected, block)
        length = int(kept.queries(block).input_ids.shape[1])
        for layer in range(len(calls)):
            last = kept.num_heads(block, layer) - 1
            for head, query in ((0, 0), (last, length - 1), (last, length // 2)):
                got = kept.neuron(block, layer, head, query)
                want = recorded.neuron(block, layer, head, query)
                where = (block, layer, head, query)
                for part in ("query", "keys", "scores", "scaled_scores"):
                    torch.testing.assert_close(
                        getattr(got, part), getattr(want, part), atol=0, rtol=0, msg=str(where)
                    )
                assert torch.equal(got.masked, want.masked), where
                assert (got.scaling, got.key_value_head) == (want.scaling, want.key_value_head)
                torch.testing.assert_close(got.weights, want.weights, atol=1e-6, rtol=0)
                torch.testing.assert_close(
                    got.weights, eager[layer][0, head, query].float(), atol=1e-5, rtol=0
                )


@pytest.mark.parametrize("name", ["llama", "mistral", "gemma2", "gpt_oss", "bert", "t5"])
def test_a_kept_layer_replayed_in_row_chunks_hands_over_its_tile(
    name: str,
    passes: dict[str, tuple[PretrainedAttentions, Any]],
    models: dict[str, PretrainedModel],
) -> None:
    """What a view's observer takes, chunk by chunk (each as wide as its last seen key),
    is the layer's tile at factor 1."""
    from attnviz.pretrained.computing import replay_kept

    result, _ = passes[name]
    block = models[name].blocks[-1]
    index = result.block_calls[block][-1]
    want = result.tile(block, result.num_layers(block) - 1)
    length_q = want.shape[-2]
    got = torch.full_like(want, float("nan"))
    done: list[bool] = []

    class Chunks:
        def row_chunks(self, length_q: int, *args: Any) -> list[tuple[int, int]]:
            return [(0, 3), (3, 7), (7, length_q)]

        def take(self, start: int, stop: int, weights: torch.Tensor) -> None:
            got[:, :, start:stop] = 0.0
            got[:, :, start:stop, : weights.shape[-1]] = weights

        def layer_done(self) -> None:
            done.append(True)

    assert result.kept is not None and length_q > 7
    replay_kept(Chunks(), result.kept, index)  # type: ignore[arg-type]
    assert done == [True]
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)


def test_a_pass_over_the_memory_budget_is_kept_on_disk_memory_mapped(
    folders: dict[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A kept pass too large for the memory budget goes to a memory-mapped file (its name
    removed at once): the views of it are the same, run no forward pass, and leave nothing
    in the temporary folder; with no disk budget it is not kept."""
    import tempfile

    from attnviz.pretrained.recordings import RecordingCache

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    model = load_model_dir("llama", folders["llama"])
    batch = model.tokenize([LONG])
    runs = counted_runs(monkeypatch)

    def view(cache: RecordingCache, observe: bool = False, **options: Any) -> Any:
        return walked(prepared(model, batch, cache, observe=observe, **options))[1]

    on_disk = RecordingCache(1, disk_bytes=10**8)  # no room in memory
    view(on_disk, observe=True, display_size=5)
    in_memory, mapped = on_disk.held_bytes
    assert in_memory == 0 and mapped > 0
    assert list(tmp_path.iterdir()) == []  # the file's name is gone at once
    reference = RecordingCache(10**8, disk_bytes=0)
    head = {"layer_index": 1, "head_index": 2}
    runs.clear()
    got = view(on_disk, **head)
    assert runs == []  # the kept pass on disk: no forward pass
    want = view(reference, **head)
    torch.testing.assert_close(got.attentions, want.attentions, atol=1e-5, rtol=0)
    nowhere = RecordingCache(1, disk_bytes=0)
    view(nowhere, observe=True, display_size=5)
    runs.clear()
    view(nowhere, **head)
    assert len(runs) == 1  # not kept: the pass runs again


@pytest.mark.parametrize("name", NAMES)
def test_one_input_alone_as_the_page_runs_it_is_kept_exact(
    name: str, models: dict[str, PretrainedModel], folders: dict[str, Path]
) -> None:
    """One input (B = 1, the page's case: weights written in place), every layer kept with
    no refusal, and its replayed weights equal eager attention."""
    from attnviz.pretrained.tiles import tile_weights

    model = models[name]
    batch = model.tokenize([LONG])
    targets = model.decoder_inputs(tiny.TARGETS[:1]) if model.family == "encoder-decoder" else None
    result = model.run(batch, targets, device="cpu", record=False, keep=True)
    assert result.kept is not None and result.kept.exact, [
        layer.refusal for layer in result.kept.layers if layer.refusal
    ]
    inputs = {"input_ids": batch.input_ids}
    if targets is not None:
        inputs["decoder_input_ids"] = targets.input_ids
    with torch.inference_mode():
        expected = eager_model(folders[name], model.family)(**inputs, output_attentions=True)
    for block in model.blocks:
        for layer, weights in enumerate(eager_maps(expected, block)):
            kept = result.kept.layers[result.block_calls[block][layer]]
            _, heads, length_q, length_k = kept.shape
            got = tile_weights(kept, range(heads), range(length_q), range(length_k))
            torch.testing.assert_close(got, weights.float(), atol=1e-5, rtol=0)


def test_a_recorded_pass_of_an_input_kept_for_tiles_keeps_its_name_and_tiles(
    folders: dict[str, Path],
) -> None:
    """The neuron view of an input whose pass is kept for tiles only runs a recorded pass;
    the pass's name (pass_key) goes on naming it, with the same tiles, and the cache holds
    one entry for the input."""
    from attnviz.pretrained.recordings import RecordingCache

    model = load_model_dir("llama", folders["llama"])
    batch = model.tokenize([LONG])
    cache = RecordingCache(10**8)
    grid = cache.observed(model, batch, None, None, device="cpu", record=False, keep=True)
    name = cache.pass_key(model, batch, device="cpu")
    assert name is not None and grid.tiles_only
    recorded = cache.run(model, batch, device="cpu", states=True)
    assert recorded.recording.calls and recorded.kept is grid.kept
    assert cache.pass_key(model, batch, device="cpu") == name
    found = cache.by_pass_key(name)
    assert found is not None and found[1] is recorded
    torch.testing.assert_close(found[1].tile("decoder", 1), grid.tile("decoder", 1))
    assert cache.run(model, batch, device="cpu", states=True) is recorded  # kept: no pass


@pytest.mark.parametrize("chunk", [1, 10**9])
def test_a_pass_kept_for_tiles_gives_its_head_groups_as_a_recorded_one(
    chunk: int, passes: dict[str, tuple[PretrainedAttentions, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """head_groups of a pass kept for tiles only: whole key/value groups, as many as fit
    HEAD_CHUNK_FLOATS (one group each at the smallest), that make up the layer."""
    from attnviz.pretrained import results

    monkeypatch.setattr(results, "HEAD_CHUNK_FLOATS", chunk)
    result, _ = passes["llama"]  # 4 query heads over 2 key/value heads
    assert result.tiles_only
    for layer in range(result.num_layers("decoder")):
        pieces = list(result.head_groups("decoder", layer))
        assert [first for first, _ in pieces] == ([0, 2] if chunk == 1 else [0])
        torch.testing.assert_close(
            torch.cat([w for _, w in pieces], dim=1), result.tile("decoder", layer)
        )


def test_a_recorded_pass_whose_tiles_overflow_the_budget_is_kept_as_its_tiles(
    folders: dict[str, Path],
) -> None:
    """A cache with room for a pass's recorded states but not for them with the tiles' LSE
    keeps the tiles alone (smaller: no value states), so the zoom and the plain views of
    the input still run no forward pass; before, it kept nothing."""
    import dataclasses

    from attnviz.pretrained.recordings import RecordingCache, recording_bytes

    model = load_model_dir("llama", folders["llama"])
    batch = model.tokenize([LONG])
    full = RecordingCache(10**9).observed(model, batch, None, None, device="cpu", keep=True)
    assert full.kept is not None and full.recording.calls
    states = recording_bytes(dataclasses.replace(full, kept=None))
    assert states < recording_bytes(full)
    cache = RecordingCache(states)  # the states fit alone, not with the LSE
    cache.observed(model, batch, None, None, device="cpu", keep=True)
    key = cache.pass_key(model, batch, device="cpu")
    assert key is not None
    found = cache.by_pass_key(key)
    assert found is not None and found[1].tiles_only
    torch.testing.assert_close(found[1].tile("decoder", 1), full.tile("decoder", 1))
    assert cache.held_bytes[0] == recording_bytes(found[1]) < states
