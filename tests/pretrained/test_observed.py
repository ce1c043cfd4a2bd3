"""The grid computed during the forward pass equals the grid walked from a recording.

An observed walk (:class:`attnviz.pretrained.display.WalkObserver`) runs the model with
each layer of its block computing its weights by the model's own eager attention, in
chunks of query rows, and building the view from each chunk as it comes. Its layers,
means, rollout and hidden share equal those of a walk over a recorded pass (itself
equal to transformers' ``output_attentions``, tests/pretrained/test_families.py), with
chunks of a few rows (many per layer, starting inside words and pooled blocks) and with
one chunk per layer; the model's outputs are unchanged.
"""

import itertools
import time

import pytest
import torch
from attnviz.attention.cancellation import ComputeCancelledError
from attnviz.attention.pooling import block_factor
from attnviz.pretrained import PretrainedModel
from attnviz.pretrained import computing as computing_module
from attnviz.pretrained import display as display_module
from attnviz.pretrained.display import LayerWalk
from attnviz.pretrained.loading import load_model_dir
from attnviz.pretrained.streaming import ProgressBudget

from tests.pretrained import tiny
from tests.pretrained.support import require_transformers

FAMILIES = ["llama", "mistral", "gpt2", "bert", "t5", "bart"]
TEXT = " ".join(["the cat sat on the mat because it was tired"] * 3)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, PretrainedModel]:
    require_transformers()
    root = tmp_path_factory.mktemp("tiny-observed")
    return {name: load_model_dir(name, tiny.save_tiny(name, root / name)) for name in FAMILIES}


def walks(model: PretrainedModel) -> list[dict[str, object]]:
    """Every display choice of a grid: blocks, hiding, merging, pooling, one head."""
    return [
        {
            "block": block,
            "hide_special_tokens": hide,
            "merge_words": merge,
            "display_size": size,
            "layer_index": None if head is None else 1,
            "head_index": head,
        }
        for block, hide, merge, size, head in itertools.product(
            model.blocks, [False, True], [False, True], [4, 7, 64, None], [None, 1]
        )
        if size is not None or head is not None  # a whole layer at full size is not observed
        if not (hide and model.family == "decoder")  # tiny decoders have no special tokens
    ]


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("chunk_floats", [150, 2**23])
def test_an_observed_walk_equals_the_walk_of_a_recorded_pass(
    models: dict[str, PretrainedModel],
    name: str,
    chunk_floats: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(computing_module, "OBSERVED_CHUNK_FLOATS", chunk_floats)
    # averages (and a clicked head's layer mean) pooled here too, in blocks of 5 or 6
    monkeypatch.setattr(display_module, "MAX_AVERAGE_SIZE", 6)
    model = models[name]
    batch = model.tokenize([TEXT])
    targets = (
        model.decoder_inputs(["a big red house and a small tree today"])
        if model.family == "encoder-decoder"
        else None
    )
    recorded = model.run(batch, targets)
    block_of = model.block_of(model.model)
    chunks: list[int] = []
    for options in walks(model):
        expected = LayerWalk(recorded, **options)  # type: ignore[arg-type]
        expected_layers = list(expected.layers())
        expected_view = expected.view()

        def run(observer: object) -> object:
            original = observer.row_chunks  # type: ignore[attr-defined]

            def counted(*args: int) -> list[tuple[int, int]]:
                found = original(*args)
                chunks.append(len(found))
                return found  # type: ignore[no-any-return]

            observer.row_chunks = counted  # type: ignore[attr-defined]
            return model.run(batch, targets, observer=observer, record=False)  # type: ignore[arg-type]

        walk = LayerWalk(recorded, **options, pending=run, block_of=block_of)  # type: ignore[arg-type]
        assert walk.observed
        layers = list(walk.layers())
        view = walk.view()
        assert [m.layer for m in layers] == [m.layer for m in expected_layers]
        for got, want in zip(layers, expected_layers, strict=True):
            torch.testing.assert_close(got.attentions, want.attentions, atol=1e-5, rtol=0)
            torch.testing.assert_close(got.head_mean, want.head_mean, atol=1e-5, rtol=0)
        torch.testing.assert_close(view.layer_mean, expected_view.layer_mean, atol=1e-5, rtol=0)
        if expected_view.rollout is None:
            assert view.rollout is None
        else:
            assert view.rollout is not None
            torch.testing.assert_close(view.rollout, expected_view.rollout, atol=1e-5, rtol=0)
        assert view.pooling == expected_view.pooling
        assert view.tokens == expected_view.tokens
        if expected_view.special_share is None:
            assert view.special_share is None
        else:
            assert view.special_share == pytest.approx(expected_view.special_share, abs=1e-6)
        # the observed pass's own result replaces the placeholder, next tokens included
        assert walk.result is not recorded and walk.result.compute_ms > 0
        if model.family == "decoder":
            assert walk.result.next_tokens is not None and recorded.next_tokens is not None
            assert torch.equal(walk.result.next_tokens.ids, recorded.next_tokens.ids)
    assert max(chunks) > 1 if chunk_floats == 150 else max(chunks) == 1


def test_an_observed_walk_given_up_stops_its_pass(
    models: dict[str, PretrainedModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(computing_module, "OBSERVED_CHUNK_FLOATS", 150)
    model = models["llama"]
    batch = model.tokenize([TEXT])
    recorded = model.run(batch)
    calls: list[int] = []

    def walk() -> LayerWalk:
        def run(observer: object) -> object:
            take = observer.take  # type: ignore[attr-defined]

            def slow(*args: object) -> None:
                if observer.layer >= 1 and closing:  # type: ignore[attr-defined]
                    # layer 0 is sent: the pass goes no further until the client is gone
                    assert observer.stopped.wait(300)  # type: ignore[attr-defined]
                calls.append(1)
                take(*args)

            observer.take = slow  # type: ignore[attr-defined]
            return model.run(batch, observer=observer, record=False)  # type: ignore[arg-type]

        return LayerWalk(
            recorded, display_size=8, pending=run, block_of=model.block_of(model.model)
        )

    closing = False
    assert len(list(walk().layers())) == model.num_layers
    whole = len(calls)
    calls.clear()
    closing = True
    layers = walk().layers()
    next(layers)  # layer 0 sent: the pass waits in its thread
    layers.close()  # the client is gone: the pass stops at its next chunk, joined
    stopped = len(calls)
    assert stopped < whole  # layer 0's chunks and the one that found the client gone


@pytest.mark.parametrize("observed", [True, False])
def test_a_walk_past_its_deadline_stops_with_the_deadline_s_message(
    models: dict[str, PretrainedModel], observed: bool
) -> None:
    model = models["llama"]
    batch = model.tokenize([TEXT])
    recorded = model.run(batch)
    walk = LayerWalk(
        recorded,
        display_size=8,
        pending=(lambda observer: model.run(batch, observer=observer, record=False))
        if observed
        else None,
        block_of=model.block_of(model.model),
    )
    assert walk.observed == observed
    walk.deadline = ProgressBudget(60, "the time budget of 60 s ran out")
    walk.deadline.until = time.monotonic() - 1  # 60 s without a new layer
    with pytest.raises(ComputeCancelledError, match="time budget of 60 s"):
        list(walk.layers())


def dense_view(
    result: object, block: str, hide: bool, merge: bool
) -> tuple[torch.Tensor, torch.Tensor, float | None]:
    """Every layer's shown maps, their mean and the hidden share, computed whole (no chunk,
    no walk): the recorded weights of each layer, the hidden rows and columns removed and
    rows divided by their sums, then pieces merged into words by explicit matrices (mean
    over a word's query pieces, sum over its key pieces)."""
    queries, keys = result.queries(block), result.keys(block)  # type: ignore[attr-defined]
    keep_q = (
        ~queries.special_tokens_mask[0]
        if hide
        else torch.ones(queries.input_ids.shape[1], dtype=torch.bool)
    )
    keep_k = (
        ~keys.special_tokens_mask[0]
        if hide
        else torch.ones(keys.input_ids.shape[1], dtype=torch.bool)
    )

    def merger(batch: object, keep: torch.Tensor) -> torch.Tensor:
        words = [batch.words(0)[i] for i in keep.nonzero().flatten().tolist()]  # type: ignore[attr-defined]
        if not merge:
            return torch.eye(len(words))
        labels = [i for i, w in enumerate(words) if i == 0 or words[i - 1] != w]
        matrix = torch.zeros(len(labels), len(words))
        for row, start in enumerate(labels):
            stop = labels[row + 1] if row + 1 < len(labels) else len(words)
            matrix[row, start:stop] = 1.0
        return matrix

    mean_q = merger(queries, keep_q)
    mean_q = mean_q / mean_q.sum(dim=1, keepdim=True)
    sum_k = merger(keys, keep_k).t()
    shown, shares = [], []
    for layer in range(result.num_layers(block)):  # type: ignore[attr-defined]
        weights = result.layer_weights(block, layer)[0].double()  # type: ignore[attr-defined]
        rows = weights[:, keep_q][:, :, keep_k]
        shares.append(weights[:, keep_q][:, :, ~keep_k].sum(dim=-1).flatten())
        rows = rows / rows.sum(dim=-1, keepdim=True)
        shown.append(mean_q.double() @ rows @ sum_k.double())
    maps = torch.stack(shown)
    share = torch.cat(shares).mean().item() if hide else None
    return maps, maps.mean(dim=(0, 1)), share


def brute_block_max(maps: torch.Tensor, factor_q: int, factor_k: int) -> torch.Tensor:
    """(..., R, C) maps' maximum over each block of factor_q rows x factor_k columns, by loops."""
    rows, columns = maps.shape[-2:]
    out = torch.zeros((*maps.shape[:-2], -(-rows // factor_q), -(-columns // factor_k)))
    for i in range(out.shape[-2]):
        for j in range(out.shape[-1]):
            block = maps[..., i * factor_q : (i + 1) * factor_q, j * factor_k : (j + 1) * factor_k]
            out[..., i, j] = block.amax(dim=(-2, -1))
    return out.double()


@pytest.mark.parametrize("name", ["bert", "t5", "bart"])
def test_a_walk_in_chunks_of_a_few_rows_equals_the_dense_maps(
    models: dict[str, PretrainedModel], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An independent reference for the one pipeline: hiding, renormalising, merging and
    block-max pooling in chunks of a few rows (each layer replayed in many chunks, pooled
    blocks spanning chunks) equal the whole maps, pooled by loops."""
    monkeypatch.setattr(computing_module, "OBSERVED_CHUNK_FLOATS", 150)
    monkeypatch.setattr(computing_module, "MIN_CHUNK_ROWS", 1)  # chunk_rows reads it
    model = models[name]
    batch = model.tokenize(["the unbelievably tired cat sat on the mat, because it was tired"])
    targets = (
        model.decoder_inputs(["a big red house and a small tree today"])
        if model.family == "encoder-decoder"
        else None
    )
    recorded = model.run(batch, targets)
    chunks: list[int] = []
    original = display_module.WalkObserver.row_chunks

    def counted(self: object, *args: int) -> list[tuple[int, int]]:
        found = original(self, *args)  # type: ignore[arg-type]
        chunks.append(len(found))
        return found

    monkeypatch.setattr(display_module.WalkObserver, "row_chunks", counted)
    for block, hide, merge, size in itertools.product(
        model.blocks, [False, True], [False, True], [None, 3, 4]
    ):
        chunks.clear()
        recorded.memo.averages.clear()
        walk = LayerWalk(
            recorded, block=block, hide_special_tokens=hide, merge_words=merge, display_size=size
        )
        view = walk.view()
        maps, mean, share = dense_view(recorded, block, hide, merge)
        assert min(chunks) > 2  # every layer in several chunks
        if size is not None:  # pooled blocks that span chunks: each block's maximum, whole
            factors = (block_factor(maps.shape[-2], size), block_factor(maps.shape[-1], size))
            maps = brute_block_max(maps, *factors)
        torch.testing.assert_close(view.attentions.double(), maps, atol=1e-5, rtol=0)
        torch.testing.assert_close(view.layer_mean.double(), mean, atol=1e-5, rtol=0)
        if share is None:
            assert view.special_share is None
        else:
            assert view.special_share == pytest.approx(share, abs=1e-6)


def test_a_chunk_is_sized_for_the_device_its_call_runs_on(
    models: dict[str, PretrainedModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CUDA call gets chunks 8x larger (no GPU needed: the sizes of a device named cuda);
    an observed walk and a replay size each chunk for the device of its call."""
    floats = computing_module.observed_chunk_floats
    assert floats(torch.device("cuda")) == 8 * floats(torch.device("cpu"))
    per_row = 9 * 32_768  # SmolLM2's 9 heads at 32,768 keys
    cpu = computing_module.chunk_rows(32_768, per_row, floats(torch.device("cpu")))
    cuda = computing_module.chunk_rows(32_768, per_row, floats(torch.device("cuda")))
    assert (cpu, cuda) == (28, 227)  # 1,171 and 145 chunks a layer
    devices: list[str] = []

    def spy(device: torch.device) -> int:
        devices.append(device.type)
        return floats(device)

    monkeypatch.setattr(display_module, "observed_chunk_floats", spy)
    model = models["bert"]
    batch = model.tokenize(["the cat sat on the mat because it was tired"])
    recorded = model.run(batch)
    list(LayerWalk(recorded, display_size=4).layers())  # replayed
    replayed = len(devices)
    observed = LayerWalk(  # a pooled grid (one at full size is replayed, not observed)
        recorded,
        display_size=4,
        pending=lambda observer: model.run(batch, observer=observer, record=False),  # type: ignore[arg-type]
        block_of=model.block_of(model.model),
    )
    list(observed.layers())  # observed during the pass
    assert replayed == model.num_layers and len(devices) == 2 * model.num_layers
    assert set(devices) == {"cpu"}


def test_a_stream_stopped_from_outside_stops_its_observed_pass_at_the_next_chunk(
    models: dict[str, PretrainedModel],
) -> None:
    """A stream whose client went away stops its walk through the budget (``stop``): the
    pass, waiting in its own thread for the next layer to be asked, stops at its next
    chunk with the reason given, its thread ends, and nothing ran after."""
    import threading

    model = models["llama"]
    batch = model.tokenize([TEXT])
    recorded = model.run(batch)
    calls: list[int] = []
    first_layer_sent = threading.Event()

    def run(observer: object) -> object:
        take = observer.take  # type: ignore[attr-defined]

        def gated(*args: object) -> None:
            if observer.layer >= 1:  # type: ignore[attr-defined]
                first_layer_sent.set()
                # layer 0 is out: the next chunk waits until the stream is stopped
                assert budget.stopped is not None or stopped.wait(300)
            calls.append(1)
            take(*args)

        observer.take = gated  # type: ignore[attr-defined]
        return model.run(batch, observer=observer, record=False)  # type: ignore[arg-type]

    walk = LayerWalk(recorded, display_size=8, pending=run, block_of=model.block_of(model.model))
    budget = walk.deadline = ProgressBudget(300, "the time budget ran out")
    stopped = threading.Event()
    layers = walk.layers()
    next(layers)
    assert first_layer_sent.wait(300)
    budget.stop("the stream's client went away")  # from the sender's thread
    stopped.set()
    with pytest.raises(ComputeCancelledError, match="client went away"):
        next(layers)
    made = len(calls)
    assert made < 4 * model.num_layers  # layer 0 and the chunk that found it stopped
    assert not [t for t in threading.enumerate() if t.name == "attnviz-observed-pass"]
