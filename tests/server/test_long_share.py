"""Which pretrained-model requests are long work (issue 42, class 8): long_share.

Long work runs in the long computations' share of the compute pool (all workers but
one), so that short requests always find a worker. A tiny Llama (2 layers, 2,048
positions, the tiny word tokenizer: one token per word, and its specials) runs the passes in
milliseconds; what is decided is counted in tokens. tests/server/test_disconnect.py
checks the share itself on a real server.
"""

from __future__ import annotations

from typing import Any

import pytest
from attnviz.pretrained import PretrainedModel
from attnviz.pretrained.loading import load_model_dir
from attnviz.pretrained.recordings import RecordingCache
from attnviz.server.limits import LONG_WORK_TOKENS
from attnviz.server.routers.pretrained import long_share, model_response
from attnviz.server.schemas.pretrained import PretrainedAttentionRequest
from attnviz.server.settings import Settings, get_settings
from fastapi import HTTPException

from tests.pretrained import tiny
from tests.pretrained.support import require_transformers
from tests.server.support import run_in_a_thread

MODEL = "long-llama"
LONG_INPUT = ("texts", "a long input's maps")


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> PretrainedModel:
    require_transformers()
    folder = tiny.save_tiny(
        "llama", tmp_path_factory.mktemp("long-share") / MODEL, max_position_embeddings=2048
    )
    return load_model_dir(MODEL, folder)


def words(n: int) -> str:
    """A text of ``n`` words the tiny tokenizer knows."""
    return " ".join(tiny.WORDS[i % len(tiny.WORDS)] for i in range(n))


def text_of(model: PretrainedModel, tokens: int) -> str:
    """A text the model tokenises to exactly ``tokens`` tokens (special ones included)."""
    specials = int(model.tokenize(["the"]).input_ids.shape[1]) - 1
    text = words(tokens - specials)
    assert int(model.tokenize([text]).input_ids.shape[1]) == tokens
    return text


def ask(**fields: Any) -> PretrainedAttentionRequest:
    return PretrainedAttentionRequest(model=MODEL, **fields)


def share(
    model: PretrainedModel,
    request: PretrainedAttentionRequest,
    recordings: RecordingCache | None = None,
) -> tuple[str, str] | None:
    """long_share with the default settings, and ``recordings`` (None: an empty cache)."""
    return long_share(model, request, Settings(), recordings or RecordingCache())


def test_a_sentence_is_short_and_a_long_input_is_long(llama: PretrainedModel) -> None:
    assert share(llama, ask(texts=["the cat sat"], sequence_index=0)) is None
    assert share(llama, ask(texts=["the cat sat", "a dog ran"])) is None
    at_bound = text_of(llama, LONG_WORK_TOKENS)
    over = text_of(llama, LONG_WORK_TOKENS + 1)
    assert share(llama, ask(texts=[at_bound], sequence_index=0)) is None
    assert share(llama, ask(texts=[over], sequence_index=0)) == LONG_INPUT
    # The input asked for counts, not the longest of the batch.
    assert share(llama, ask(texts=[over, "a dog ran"], sequence_index=1)) is None
    # The tokens a generation adds count: the pass runs over prompt + new tokens.
    prompt = text_of(llama, LONG_WORK_TOKENS - 10)
    assert share(llama, ask(texts=[prompt], sequence_index=0, max_new_tokens=10)) is None
    assert share(llama, ask(texts=[prompt], sequence_index=0, max_new_tokens=11)) == LONG_INPUT


def test_a_whole_batch_counts_its_padded_tokens(llama: PretrainedModel) -> None:
    half = text_of(llama, LONG_WORK_TOKENS // 2)
    assert share(llama, ask(texts=[half])) is None
    assert share(llama, ask(texts=[half, "a dog ran"])) is None  # 2 x 512: at the bound
    assert share(llama, ask(texts=[half, "a dog ran", "the cat"])) == (
        "texts",
        "a long batch's maps",
    )


@pytest.mark.parametrize("method", ["grad_rollout", "head_importance", "value_zeroing"])
def test_a_gradient_method_or_value_zeroing_is_long(llama: PretrainedModel, method: str) -> None:
    request = ask(texts=["the cat sat"], sequence_index=0, method=method)
    assert share(llama, request) == ("texts", f"the {method} maps")


def test_a_pass_kept_already_is_short(llama: PretrainedModel) -> None:
    """The grid of a long input keeps its pass; a click on one of its heads reuses it."""
    recordings = RecordingCache()
    text = text_of(llama, LONG_WORK_TOKENS + 100)
    grid = ask(texts=[text], sequence_index=0, display_size=64)
    assert share(llama, grid, recordings=recordings) == LONG_INPUT
    response = model_response(llama, grid, Settings(), recordings)
    assert response.status_code == 200
    head = ask(texts=[text], sequence_index=0, layer_index=1, head_index=2)
    assert share(llama, head, recordings=recordings) is None
    assert share(llama, grid, recordings=recordings) is None  # the grid asked again
    # Not in another cache, nor with heads switched off (a second pass, of its own).
    assert share(llama, head) == LONG_INPUT
    ablated = ask(texts=[text], sequence_index=0, display_size=64, ablate=[[0, 1]])
    assert share(llama, ablated, recordings=recordings) == LONG_INPUT


def test_a_pass_kept_for_tiles_only_leaves_the_views_that_need_states_long(
    llama: PretrainedModel,
) -> None:
    """A grid whose recorded states do not fit the cache keeps its pass for tiles only: a
    head, the grid again and the neuron view reuse it (short); the norm method, which needs
    the value states, runs a recorded pass (long)."""
    recordings = RecordingCache(max_bytes=2**21, disk_bytes=0)  # the mask (5 MB) does not fit
    text = text_of(llama, LONG_WORK_TOKENS + 100)
    grid = ask(texts=[text], sequence_index=0, display_size=64)
    assert model_response(llama, grid, Settings(), recordings).status_code == 200
    kept = recordings.kept(llama, llama.tokenize([text]), device="auto")
    assert kept is not None and kept.tiles_only
    head = ask(texts=[text], sequence_index=0, layer_index=1, head_index=2)
    assert share(llama, head, recordings=recordings) is None
    neuron = ask(
        texts=[text], sequence_index=0, layer_index=1, head_index=2, query_index=5, neuron=True
    )
    assert share(llama, neuron, recordings=recordings) is None
    norm = ask(texts=[text], sequence_index=0, layer_index=1, method="norm")
    assert share(llama, norm, recordings=recordings) == LONG_INPUT


def test_a_text_over_the_limit_is_refused_before_any_slot(llama: PretrainedModel) -> None:
    request = ask(texts=[words(200)], sequence_index=0)
    with pytest.raises(HTTPException) as refused:
        long_share(llama, request, Settings(max_seq_len=100), RecordingCache())
    assert refused.value.status_code == 413
    detail: Any = refused.value.detail
    assert detail[0]["loc"] == ["body", "texts", 0]


def test_the_share_counts_the_workers_the_pool_was_started_with() -> None:
    """A pool of 3 workers (ATTNVIZ_COMPUTE_WORKERS says 2): 2 long slots and 2 waiting,
    the fifth long request refused, as the pool's workers say (the settings' 2 would
    refuse the fourth)."""
    import asyncio

    from attnviz.server import executor

    def refused() -> bool:
        try:
            executor.refuse_when_busy("texts", "a long input's maps")
        except HTTPException as error:
            assert error.status_code == 503
            assert error.headers == {"Retry-After": "30"}
            return True
        return False

    async def scenario() -> list[bool]:
        executor.start_executor(3)
        assert executor.pool_workers() == 3
        slots = [await executor.long_slot("texts", "a long input's maps") for _ in range(2)]
        answers = [refused()]  # every slot taken, none waiting
        waiting = []
        for _ in range(2):
            waiting.append(
                asyncio.ensure_future(executor.long_slot("texts", "a long input's maps"))
            )
            await asyncio.sleep(0)  # it waits for a slot
            answers.append(refused())
        for semaphore in slots:
            semaphore.release()
        for semaphore in await asyncio.gather(*waiting):
            semaphore.release()
        answers.append(refused())
        return answers

    kept = (executor._executor, executor._workers, executor._large, executor._long)
    executor._executor = None  # the pool of an app served in this process is left alone
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("ATTNVIZ_COMPUTE_WORKERS", "2")
            get_settings.cache_clear()
            assert run_in_a_thread(scenario) == [False, False, True, False]
    finally:
        get_settings.cache_clear()
        executor.stop_executor()
        executor._executor, executor._workers, executor._large, executor._long = kept
