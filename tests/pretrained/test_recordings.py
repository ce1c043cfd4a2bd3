"""The kept forward passes (attnviz.pretrained.recordings): by input, least recently used
out, within the byte budget; a pass larger than the whole budget is not kept."""

import pytest
import torch
from attnviz.pretrained import PretrainedModel
from attnviz.pretrained.recordings import RecordingCache, recording_bytes

TEXTS = ["The cat sat on the mat.", "A dog ran in the park.", "Rain fell all day long."]


@pytest.fixture
def runs(minilm: PretrainedModel, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts of the forward passes the model really runs."""
    ran: list[str] = []
    run = PretrainedModel.run

    def counted(self, batch, targets=None, *, device="auto", ablate=None):  # type: ignore[no-untyped-def]
        ran.append(batch.tokens[0][1])
        return run(self, batch, targets, device=device, ablate=ablate)

    monkeypatch.setattr(PretrainedModel, "run", counted)
    return ran


def test_the_same_input_reuses_its_pass_within_the_budget(minilm, runs) -> None:  # type: ignore[no-untyped-def]
    batches = [minilm.tokenize([text]) for text in TEXTS]
    size = recording_bytes(minilm.run(batches[0], device="cpu"))
    runs.clear()
    cache = RecordingCache(max_bytes=2 * size + size // 2)  # room for two of them
    first = cache.run(minilm, batches[0], device="cpu")
    assert cache.run(minilm, batches[0], device="cpu") is first
    cache.run(minilm, batches[1], device="cpu")
    cache.run(minilm, batches[0], device="cpu")  # used again: now the most recent
    cache.run(minilm, batches[2], device="cpu")  # over budget: the least recent (1) goes
    assert cache.run(minilm, batches[0], device="cpu") is first
    cache.run(minilm, batches[1], device="cpu")
    assert runs == ["the", "a", "rain", "a"]
    assert (cache.hits, cache.misses) == (3, 4)


def test_a_pass_over_the_whole_budget_is_not_kept(minilm, runs) -> None:  # type: ignore[no-untyped-def]
    batches = [minilm.tokenize([text]) for text in TEXTS[:2]]
    size = recording_bytes(minilm.run(batches[0], device="cpu"))
    runs.clear()
    cache = RecordingCache(max_bytes=size - 1)
    cache.run(minilm, batches[0], device="cpu")
    cache.run(minilm, batches[0], device="cpu")  # the idle server never holds it: run again
    assert runs == ["the", "the"]
    roomy = RecordingCache(max_bytes=size)
    kept = roomy.run(minilm, batches[0], device="cpu")
    assert roomy.run(minilm, batches[0], device="cpu") is kept
    off = RecordingCache(max_bytes=0)
    off.run(minilm, batches[0], device="cpu")
    off.run(minilm, batches[0], device="cpu")
    assert runs[-3:] == ["the", "the", "the"]


def test_an_ablated_pass_is_kept_apart_from_the_intact_one(minilm, runs) -> None:  # type: ignore[no-untyped-def]
    batch = minilm.tokenize([TEXTS[0]])
    cache = RecordingCache()
    intact = cache.run(minilm, batch, device="cpu")
    module = intact.recording.calls[0].module
    ablated = cache.run(minilm, batch, device="cpu", ablate={id(module): (3,)})
    assert ablated is not intact
    assert cache.run(minilm, batch, device="cpu", ablate={id(module): (3,)}) is ablated
    assert cache.run(minilm, batch, device="cpu") is intact
    assert runs == ["the", "the"]
    # Layer 0's weights are computed before the ablated head writes anything; layer 1's
    # come from what layer 0 wrote without it.
    assert torch.equal(intact.layer_weights("encoder", 0), ablated.layer_weights("encoder", 0))
    assert not torch.equal(intact.layer_weights("encoder", 1), ablated.layer_weights("encoder", 1))
