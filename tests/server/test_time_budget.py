"""When a request's time budget ends, its computation stops (issue 29, classes 5 and 7).

The unit tests drive :mod:`attnviz.attention.cancellation` directly: a forward pass, a
generation and a layer walk each stop at their next check once cancelled. The API test
makes each attention layer of a tiny decoder slow (0.15 s, by wrapping transformers'
SDPA function that the recorder calls), asks for generation that would take seconds,
with ATTNVIZ_COMPUTE_TIMEOUT_S = 0.8 and one compute worker: the 503 names ``texts``,
then no attention layer starts more than one layer's time after it, and the only worker
is free for the next request at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.pretrained.tiny import TEXTS, save_tiny
from tests.server.support import run_in_a_thread, serving

SLOW_LAYER_S = 0.15


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    root = tmp_path_factory.mktemp("budget")
    env = {
        "ATTNVIZ_MODEL_DIRS": json.dumps([str(save_tiny("llama", root / "tiny-llama"))]),
        "ATTNVIZ_PACKAGED_MODELS": "false",
        "ATTNVIZ_COMPUTE_WORKERS": "1",
        "ATTNVIZ_COMPUTE_TIMEOUT_S": "0.8",
    }
    with serving(env) as served:
        yield served


def test_check_cancelled_is_silent_outside_and_raises_once_cancelled() -> None:
    from attnviz.attention.cancellation import (
        Cancellation,
        ComputeCancelledError,
        cancellable,
        check_cancelled,
    )

    check_cancelled()  # no computation to cancel: nothing happens
    token = Cancellation()
    with cancellable(token):
        check_cancelled()
        token.cancel("the budget ran out")
        with pytest.raises(ComputeCancelledError, match="the budget ran out"):
            check_cancelled()
    check_cancelled()  # outside the block again


@pytest.fixture
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from attnviz.pretrained.loading import load_model

    root = tmp_path_factory.mktemp("llama")
    return load_model("tiny-llama", save_tiny("llama", root / "tiny-llama"), root / "cache", None)


def slowed(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, delay_s: float) -> list[float]:
    """When each call of ``owner.name`` started (perf_counter), each delayed ``delay_s``."""
    started: list[float] = []
    original = getattr(owner, name)

    def slow(*args: Any, **kwargs: Any) -> Any:
        started.append(time.perf_counter())
        time.sleep(delay_s)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, slow)
    return started


def attention_calls(monkeypatch: pytest.MonkeyPatch, delay_s: float = 0.0) -> list[float]:
    """When each attention layer's SDPA started (perf_counter), each delayed ``delay_s``."""
    from transformers.integrations import sdpa_attention

    return slowed(monkeypatch, sdpa_attention, "sdpa_attention_forward", delay_s)


@pytest.mark.parametrize("work", ["run", "generate", "walk"])
def test_a_cancelled_computation_stops_at_its_next_layer(
    tiny_llama: Any, monkeypatch: pytest.MonkeyPatch, work: str
) -> None:
    from attnviz.attention.cancellation import Cancellation, ComputeCancelledError, cancellable
    from attnviz.pretrained.display import LayerWalk

    batch = tiny_llama.tokenize(TEXTS[:1])
    result = tiny_llama.run(batch, device="cpu") if work == "walk" else None
    calls = attention_calls(monkeypatch)
    token = Cancellation()
    token.cancel()
    with cancellable(token), pytest.raises(ComputeCancelledError):
        if work == "run":
            tiny_llama.run(batch, device="cpu")
        elif work == "generate":
            tiny_llama.generate(batch, 20, device="cpu", record_steps=False)
        else:
            LayerWalk(result).view()
    assert calls == []  # stopped before the first attention layer


def test_after_a_time_out_the_work_stops_and_the_worker_is_free(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attnviz.pretrained.recordings import RECORDINGS

    RECORDINGS.clear()
    started = attention_calls(monkeypatch, SLOW_LAYER_S)
    body = {
        "model": "tiny-llama",
        "texts": TEXTS[:1],
        "sequence_index": 0,
        "max_new_tokens": 30,  # 31 passes x 2 layers x 0.15 s: over 9 s of work
        "temperature": 1.0,
    }
    response = client.post("/api/v1/models/attention", json=body)
    refused = time.perf_counter()
    assert response.status_code == 503, response.text
    detail = response.json()["detail"][0]
    assert detail["loc"] == ["body", "texts"]
    assert "0.8 s" in detail["msg"] and "stopped" in detail["msg"]
    time.sleep(4 * SLOW_LAYER_S)
    count = len(started)
    time.sleep(4 * SLOW_LAYER_S)
    assert len(started) == count, "attention layers still start after the 503"
    assert started[-1] <= refused + 2 * SLOW_LAYER_S
    assert len(started) < 2 * 31  # stopped well before the end of its work
    # The only compute worker is free: a request needing it is answered.
    monkeypatch.undo()
    small = client.post(
        "/api/v1/models/attention", json={"model": "tiny-llama", "texts": TEXTS[:1]}
    )
    assert small.status_code == 200, small.text


def test_work_given_up_while_it_waited_for_a_worker_never_starts() -> None:
    """A computation whose budget ends while the only worker is busy does not run later."""
    from attnviz.attention.cancellation import check_cancelled
    from attnviz.server import executor

    ran: list[str] = []

    def busy() -> None:
        for _ in range(10):
            time.sleep(0.05)
            check_cancelled()
        ran.append("busy")

    def queued() -> None:
        ran.append("queued")

    async def scenario() -> None:
        first = asyncio.ensure_future(executor.run_within(5.0, busy))
        await asyncio.sleep(0.05)
        with pytest.raises(TimeoutError):
            await executor.run_within(0.1, queued)
        await first
        await executor.run_compute(lambda: None)  # the queue has drained

    kept = (executor._executor, executor._large)  # the served app's pool, put back after
    executor._executor = None
    executor.start_executor(1)
    try:
        run_in_a_thread(scenario)
    finally:
        executor.stop_executor()
        executor._executor, executor._large = kept
    assert ran == ["busy"]


def test_a_client_gone_before_the_first_chunk_frees_its_large_request_slot() -> None:
    """Starlette cancels the send of a response whose client left before its first chunk;
    the body generator then never starts, yet the slot held_while_sent took must come
    back (else, after ATTNVIZ_COMPUTE_WORKERS such clients, every large request waits)."""
    from attnviz.server import executor
    from starlette.responses import StreamingResponse

    async def never_read() -> Any:
        yield b"never sent"

    async def gone_at_once() -> dict[str, str]:
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        await asyncio.sleep(1)  # the client is gone: this send never completes in time

    async def scenario() -> int:
        slot = asyncio.Semaphore(1)
        executor._large = slot

        async def work() -> StreamingResponse:
            return StreamingResponse(never_read())

        for _ in range(3):  # more clients than slots
            response = await asyncio.wait_for(executor.held_while_sent(work()), 2)
            scope = {"type": "http", "asgi": {"spec_version": "2.4"}, "method": "POST"}
            with contextlib.suppress(Exception):
                await asyncio.wait_for(response(scope, gone_at_once, send), 2)
        return slot._value

    kept = executor._large
    try:
        free = run_in_a_thread(scenario)
    finally:
        executor._large = kept
    assert free == 1  # the one slot is free again after three gone clients


class SteppedClock:
    """``time`` for the stream's budget (:mod:`attnviz.pretrained.streaming`): its
    ``monotonic()`` moves only when a slowed layer steps it, so the budget sees each
    layer take exactly its delay however busy the machine is."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def monotonic(self) -> float:
        return self.now


def slow_kept_layers(monkeypatch: pytest.MonkeyPatch, delay_s: float) -> list[float]:
    """When each kept attention layer started (a streamed grid keeps its pass), on the
    budget's clock, which each layer steps by ``delay_s`` (:class:`SteppedClock`)."""
    from attnviz.pretrained import recorder, streaming

    clock = SteppedClock()
    monkeypatch.setattr(streaming, "time", clock)
    started: list[float] = []
    original = recorder.attention_with_lse

    def slow(*args: Any, **kwargs: Any) -> Any:
        started.append(clock.now)
        clock.now += delay_s
        return original(*args, **kwargs)

    monkeypatch.setattr(recorder, "attention_with_lse", slow)
    return started


def stream_lines(client: TestClient) -> list[dict[str, Any]]:
    body = {"model": "tiny-llama", "texts": TEXTS[:1], "display_size": 8}
    response = client.post("/api/v1/models/attention/layers", json=body)
    assert response.status_code == 200, response.text
    return [json.loads(line) for line in response.text.splitlines()]


def test_a_stream_whose_layers_keep_coming_runs_past_the_budget(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2 layers of 0.5 s each: 1 s in all, over the 0.8 s budget, but never 0.8 s without
    a new layer: the stream ends with its end line, every layer sent."""
    from attnviz.pretrained.recordings import RECORDINGS

    RECORDINGS.clear()
    started = slow_kept_layers(monkeypatch, 0.5)
    lines = stream_lines(client)
    assert started[-1] + 0.5 - started[0] > 0.8  # longer than the budget in all
    assert len(started) == 2
    assert [line["type"] for line in lines] == ["start", "layer", "layer", "end"]


def test_a_stream_with_no_new_layer_for_the_budget_stops_with_an_error_line(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attnviz.pretrained.recordings import RECORDINGS

    RECORDINGS.clear()
    slow_kept_layers(monkeypatch, 1.0)  # the first layer alone takes over the budget
    lines = stream_lines(client)
    assert lines[-1]["type"] == "error", lines[-1]
    assert "no new layer for 0.8 s" in lines[-1]["detail"]
    assert "ATTNVIZ_COMPUTE_TIMEOUT_S" in lines[-1]["detail"]
